"""One rank of the ZeRO-3 checkpoint test (tests/training/test_zero3_checkpoint.py), run under
``torchrun --nproc_per_node N``: ``python tests/training/zero3_worker.py MODE OUT ROOT OPTIONS
PRECISION`` (``fp32``: fp32 weights; ``bf16``: DeepSpeed's bf16 mode).

``save``: a fresh ZeRO-3 trainer takes one step on this rank's shard, saves a checkpoint under
ROOT (full weights in several shards, each rank its own optimizer shard), and dumps what it
holds right after the save; then takes one more step and dumps again. ``resume``: a trainer from
other random weights loads the checkpoint, dumps, takes the same next step and dumps again.
Each rank writes ``OUT/<mode>-rank<r>.pt``: the whole weights (gathered), this rank's optimizer
state (its partition of the fp32 masters and Adam's moments) and the files it read.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

import torch

from spade.config import TrainingConfig
from spade.training.job import shard
from spade.training.trainer import GRPOTrainer
from tests.training.tiny_task import PAD, tiny_llama, varied_samples

CONFIG = TrainingConfig(
    engine="deepspeed",
    lr=1e-2,
    micro_batch_tokens=40,  # several micro-batches, unevenly many per rank
    logprob_chunk_tokens=3,  # several projection chunks, unevenly many per rank
    deepspeed={"zero_stage": 3},
)
BF16 = CONFIG.model_copy(update={"deepspeed": CONFIG.deepspeed.model_copy(update={"bf16": True})})
SHARD_BYTES = 20_000  # the tiny model's ~0.1 MB of weights in several files, by both ranks


def snapshot(trainer: GRPOTrainer, read: list[str]) -> dict:
    return {
        "weights": trainer.export_weights(merged=False),
        "optimizer": trainer.engine.optimizer_state(),
        "step": trainer.global_step,
        "read": read,
    }


def main(mode: str, out: Path, root: str, options: dict, precision: str) -> None:
    samples = varied_samples(n=12)
    model = tiny_llama(seed=0 if mode == "save" else 7)
    if precision == "bf16":  # DeepSpeed's bf16 mode: the module in bf16, fp32 masters inside
        model = model.to(torch.bfloat16)
    trainer = GRPOTrainer(model, PAD, BF16 if precision == "bf16" else CONFIG)
    rank, world = trainer.engine.rank, trainer.engine.world_size
    mine = shard(samples, rank, world)
    read: list[str] = []
    if mode == "save":
        trainer.step(mine)
        uri = trainer.save(root, storage_options=options, shard_bytes=SHARD_BYTES)
        if rank == 0:
            (out / "uri").write_text(uri)
    else:
        read = trainer.load_from((out / "uri").read_text(), storage_options=options)
    after_load = snapshot(trainer, read)
    trainer.step(mine)
    torch.save(
        {"at_save": after_load, "next": snapshot(trainer, read)}, out / f"{mode}-rank{rank}.pt"
    )
    trainer.engine.barrier()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4]), sys.argv[5])
