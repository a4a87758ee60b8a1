"""ZeRO-3 checkpoints on 2 gloo ranks: each rank writes and reads only its own optimizer shard,
full weights go out in shards written by both ranks, and a resume gives back the very weights
and Adam moments (and then the very next step); another world size is refused, saying why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from spade.errors import CheckpointError
from spade.inference.checkpoints import load_checkpoint
from spade.processes import free_port
from spade.training.trainer import GRPOTrainer
from tests.training.tiny_task import PAD, tiny_llama
from tests.training.zero3_worker import CONFIG

pytest.importorskip("deepspeed")

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "training" / "zero3_worker.py"
LAUNCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _torchrun(
    mode: str, out: Path, root: str, options: dict[str, Any], precision: str = "fp32"
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           str(WORKER), mode, str(out), root, json.dumps(options), precision]  # fmt: skip
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]


def _equal(a: Any, b: Any, where: str = "") -> None:
    """``a`` and ``b`` hold the same values, tensors bit for bit (nested dicts and lists)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            _equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.mark.parametrize(
    "precision",
    [
        "bf16",  # the GPU presets' (deepspeed.bf16): masters only in the optimizer's shards
        pytest.param("fp32", marks=pytest.mark.slow),
    ],
)
def test_two_zero3_ranks_save_their_own_shards_and_resume_exactly(tmp_path, s3_bucket, precision):
    """In DeepSpeed's bf16 mode the weights files hold bf16 copies, the fp32 masters live in
    the optimizer shards alone: the resumed ranks must get the masters back from there, or the
    next step would start from bf16-rounded ones and differ."""
    root = f"s3://{s3_bucket.name}/campaign/checkpoints"
    options = dict(s3_bucket.storage_options)
    _torchrun("save", tmp_path, root, options, precision)
    _torchrun("resume", tmp_path, root, options, precision)

    uri = (tmp_path / "uri").read_text()
    manifest = json.loads(s3_bucket.client.get_object(
        Bucket=s3_bucket.name, Key=uri.split("/", 3)[3] + "/manifest.json")["Body"].read())  # fmt: skip
    files = set(manifest["files"])
    shards = sorted(f for f in files if f.startswith("model-"))
    assert manifest["world_size"] == 2 and manifest["format"] == 2
    assert {"optimizer-rank-00000-of-00002.pt", "optimizer-rank-00001-of-00002.pt"} <= files
    assert len(shards) >= 3 and "model.safetensors.index.json" in files
    # the shards together are the whole model, as transformers and vLLM read the folder
    whole = load_checkpoint(uri, storage_options=options).tensors

    for rank in (0, 1):
        saved = torch.load(tmp_path / f"save-rank{rank}.pt", weights_only=True)
        resumed = torch.load(tmp_path / f"resume-rank{rank}.pt", weights_only=True)
        # what the rank held right after the save is what the resumed rank holds after loading
        _equal(saved["at_save"]["weights"], resumed["at_save"]["weights"], "weights")
        _equal(saved["at_save"]["optimizer"], resumed["at_save"]["optimizer"], "optimizer")
        assert resumed["at_save"]["step"] == 1
        # the fp32 masters and both Adam moments are in it, and they are this rank's slice
        state = resumed["at_save"]["optimizer"]["optimizer_state_dict"]["state"]
        moments = [s[k] for s in state.values() for k in ("exp_avg", "exp_avg_sq")]
        assert moments and all(bool(m.abs().sum() > 0) for m in moments)
        # and the next step from there is the same step, bit for bit
        _equal(saved["next"], resumed["next"] | {"read": []}, "next step")
        # a rank read its own optimizer shard and the trainer state, no weights file
        own = f"optimizer-rank-0000{rank}-of-00002.pt"
        assert resumed["at_save"]["read"] == [own, "trainer.json"]
        _equal(saved["at_save"]["weights"], whole, "the saved weights files")


def test_a_resume_on_another_world_size_is_refused_saying_why(tmp_path, s3_bucket):
    root = f"s3://{s3_bucket.name}/other"
    _torchrun("save", tmp_path, root, dict(s3_bucket.storage_options))
    alone = GRPOTrainer(tiny_llama(), PAD, CONFIG)  # one rank, in this process
    with pytest.raises(CheckpointError, match=r"saved by 2 training rank\(s\), this run has 1"):
        alone.load_from(
            (tmp_path / "uri").read_text(), storage_options=dict(s3_bucket.storage_options)
        )
