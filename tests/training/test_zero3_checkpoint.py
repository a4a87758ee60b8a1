"""ZeRO-3 checkpoints on 2 gloo ranks: each rank writes and reads only its own optimizer shard,
full weights go out in shards written by both ranks, and a resume gives back the very weights
and Adam moments (and then the very next step); another world size is refused, saying why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from spade.errors import CheckpointError
from spade.inference.checkpoints import load_checkpoint
from spade.processes import free_port
from spade.training.trainer import GRPOTrainer
from tests.training.tiny_task import PAD, assert_same, tiny_llama
from tests.training.zero3_worker import BF16

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


@dataclass(frozen=True)
class Saved:
    """A checkpoint saved by 2 ZeRO-3 ranks, and where each rank dumped what it held."""

    out: Path
    root: str
    options: dict[str, Any]
    client: Any
    bucket: str
    precision: str


def _save(tmp: Path, moto_endpoint: str, precision: str) -> Iterator[Saved]:
    import boto3

    with pytest.MonkeyPatch.context() as mp:  # dummy credentials for the ranks' s3fs
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
        bucket = f"spade-zero3-{uuid.uuid4().hex[:10]}"
        client.create_bucket(Bucket=bucket)
        options = {"endpoint_url": moto_endpoint, "key": "testing", "secret": "testing"}
        saved = Saved(
            tmp, f"s3://{bucket}/campaign/checkpoints", options, client, bucket, precision
        )
        _torchrun("save", tmp, saved.root, options, precision)
        yield saved


@pytest.fixture(scope="module")
def saved_bf16(tmp_path_factory, moto_endpoint) -> Iterator[Saved]:
    """The GPU presets' precision (deepspeed.bf16): the weights files hold bf16 copies, the
    fp32 masters live in the optimizer shards alone."""
    yield from _save(tmp_path_factory.mktemp("bf16"), moto_endpoint, "bf16")


@pytest.fixture(scope="module")
def saved_fp32(tmp_path_factory, moto_endpoint) -> Iterator[Saved]:
    yield from _save(tmp_path_factory.mktemp("fp32"), moto_endpoint, "fp32")


@pytest.mark.parametrize(
    "which", ["saved_bf16", pytest.param("saved_fp32", marks=pytest.mark.slow)]
)
def test_two_zero3_ranks_save_their_own_shards_and_resume_exactly(request, which):
    """Resumed on 2 fresh ranks from other random weights: what each rank held right after
    the save comes back bit for bit, and so does the next step. In bf16 mode the ranks must
    get the fp32 masters back from their optimizer shards, or the next step would start from
    bf16-rounded ones and differ."""
    saved: Saved = request.getfixturevalue(which)
    tmp_path, options = saved.out, saved.options
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        _torchrun("resume", tmp_path, saved.root, options, saved.precision)

    uri = (tmp_path / "uri").read_text()
    key = uri.split("/", 3)[3] + "/manifest.json"
    manifest = json.loads(saved.client.get_object(Bucket=saved.bucket, Key=key)["Body"].read())
    files = set(manifest["files"])
    shards = sorted(f for f in files if f.startswith("model-"))
    assert manifest["world_size"] == 2 and manifest["format"] == 2
    assert {"optimizer-rank-00000-of-00002.pt", "optimizer-rank-00001-of-00002.pt"} <= files
    assert len(shards) >= 3 and "model.safetensors.index.json" in files
    # the shards together are the whole model, as transformers and vLLM read the folder
    whole = load_checkpoint(uri, storage_options=options).tensors

    for rank in (0, 1):
        before = torch.load(tmp_path / f"save-rank{rank}.pt", weights_only=True)
        resumed = torch.load(tmp_path / f"resume-rank{rank}.pt", weights_only=True)
        # what the rank held right after the save is what the resumed rank holds after loading
        assert_same(before["at_save"]["weights"], resumed["at_save"]["weights"], "weights")
        assert_same(before["at_save"]["optimizer"], resumed["at_save"]["optimizer"], "optimizer")
        assert resumed["at_save"]["step"] == 1
        # the fp32 masters and both Adam moments are in it, and they are this rank's slice
        state = resumed["at_save"]["optimizer"]["optimizer_state_dict"]["state"]
        moments = [s[k] for s in state.values() for k in ("exp_avg", "exp_avg_sq")]
        assert moments and all(bool(m.abs().sum() > 0) for m in moments)
        # and the next step from there is the same step, bit for bit
        assert_same(before["next"], resumed["next"] | {"read": []}, "next step")
        # a rank read its own optimizer shard and the trainer state, no weights file
        own = f"optimizer-rank-0000{rank}-of-00002.pt"
        assert resumed["at_save"]["read"] == [own, "trainer.json"]
        assert_same(before["at_save"]["weights"], whole, "the saved weights files")


def test_a_resume_on_another_world_size_is_refused_saying_why(saved_bf16):
    alone = GRPOTrainer(tiny_llama().to(torch.bfloat16), PAD, BF16)  # one rank, in this process
    with (
        pytest.MonkeyPatch.context() as mp,
        pytest.raises(CheckpointError, match=r"saved by 2 training rank\(s\), this run has 1"),
    ):
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        alone.load_from((saved_bf16.out / "uri").read_text(), storage_options=saved_bf16.options)
