"""One DeepSpeed GRPO step on this rank's share of a fixed global batch (test helper).

Run by tests/training/test_deepspeed.py under ``torchrun --nproc_per_node N`` (or as a plain
process: one rank): ``python tests/training/ds_worker.py OUT_DIR BUDGET [flat]``. Every rank
takes a contiguous slice of the same global batch (advantages computed on the whole batch
first; with ``flat``, the second half's then set to 0, so under 2 ranks rank 1's shard has no
gradient of its own); rank 0 writes the step's metrics to ``OUT_DIR/metrics.json`` and the
updated weights to ``OUT_DIR/weights.pt``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

import torch

from spade.config import TrainingConfig
from spade.training.samples import TrainSample
from spade.training.trainer import GRPOTrainer
from tests.training.tiny_task import PAD, tiny_llama, varied_samples

GLOBAL_BATCH = 8
LR = 1e-2


def shard(samples: list[TrainSample], rank: int, world: int) -> list[TrainSample]:
    """This rank's contiguous slice of the global batch."""
    per = len(samples) // world
    return samples[rank * per : (rank + 1) * per]


def global_batch(*, flat: bool = False) -> list[TrainSample]:
    """The batch every rank slices; ``flat``: its second half's advantages set to 0."""
    samples = varied_samples(n=GLOBAL_BATCH)
    for s in samples[GLOBAL_BATCH // 2 :] if flat else []:
        s.advantage = 0.0
    return samples


def one_step(budget: int, *, flat: bool = False) -> tuple[GRPOTrainer, dict[str, float | int]]:
    """A fresh ZeRO-2 trainer (seeded tiny Llama) after one step on this rank's shard of
    :func:`global_batch`."""
    config = TrainingConfig(
        engine="deepspeed", lr=LR, micro_batch_tokens=budget, measure_shift=True
    )
    trainer = GRPOTrainer(tiny_llama(), PAD, config)
    rank, world = trainer.engine.rank, trainer.engine.world_size
    metrics = trainer.step(shard(global_batch(flat=flat), rank, world))
    return trainer, {**metrics.to_dict(), **trainer.last_shift}


def main(out: Path, budget: int, flat: bool) -> None:
    trainer, metrics = one_step(budget, flat=flat)
    weights = trainer.export_weights()
    if trainer.engine.rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        metrics["world_size"] = trainer.engine.world_size
        (out / "metrics.json").write_text(json.dumps(metrics))
        torch.save(weights, out / "weights.pt")
    trainer.engine.barrier()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:] == ["flat"])
