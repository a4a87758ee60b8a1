"""Training: GRPO on plays and designs (docs/architecture.md §2.9).

- :mod:`spade.training.samples`: :class:`TrainSample`, builders from trajectories and design
  attempts, advantages, micro-batching and collation (the one-token shift is documented there);
- :mod:`spade.training.advantages`, :mod:`spade.training.loss`: the GRPO math;
- :mod:`spade.training.trainer`: :class:`GRPOTrainer` (one optimizer step per ``step()``), on
- :mod:`spade.training.engines`: plain torch or DeepSpeed ZeRO;
- :mod:`spade.training.weights`: LoRA wrapping, weight export and loading (adapter tensors and
  the LoRA merge: :mod:`spade.inference.adapters`);
- :mod:`spade.training.checkpoint`: atomic checkpoints on any fsspec URL (reading them:
  :mod:`spade.inference.checkpoints`, which serving needs too).
- :mod:`spade.training.job`, :mod:`spade.training.launcher`, :mod:`spade.training.launch`: a
  multi-rank update (``training.ranks``): the job folder, the launch of torchrun or DeepSpeed's
  launcher over the node's ranks, and each rank's entry point.

Importing this package is light; the submodules import torch (and peft / DeepSpeed when used).
"""

import os

# See spade/inference/__init__.py: passive OpenMP waits, set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
