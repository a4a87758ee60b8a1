"""Checkpoints: round trips (local and a real S3 endpoint), kills mid-save, corruption, pruning."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from spade.config import TrainingConfig
from spade.errors import CheckpointError
from spade.inference.checkpoints import latest_checkpoint, list_checkpoints, load_checkpoint
from spade.training.checkpoint import config_hash, prune_checkpoints
from spade.training.checkpoint import save_checkpoint as _save
from spade.training.rng import capture_rng_state, restore_rng_state

REPO = Path(__file__).resolve().parents[2]


def save(root, step, **kw):
    kw.setdefault("tensors", {"w": torch.full((4,), float(step))})
    kw.setdefault("kind", "full")
    return _save(str(root), step, **kw)


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def tiny_model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.3), nn.Linear(16, 4))


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):  # data and dropout masks come from the global RNG
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


# ----------------------------------------------------------------------------- (a) local round trip


def test_tensors_round_trip_bit_identical(tmp_path):
    base = torch.randn(6, 5)
    tensors = {
        "f32": base,
        "bf16": torch.randn(3, 7).to(torch.bfloat16),
        "f16": torch.randn(4).half(),
        "i64": torch.arange(10),
        "bool": torch.tensor([True, False, True]),
        "empty": torch.empty(0, 3),
        "transposed": base.t(),  # a non-contiguous view of another tensor's storage
        "tied": base,  # the same tensor twice (tied embeddings)
    }
    uri = save(tmp_path, 7, tensors=tensors)
    assert uri == f"{tmp_path}/step-00000007"
    loaded = load_checkpoint(uri)
    assert loaded.step == 7 and loaded.info.kind == "full"
    assert set(loaded.tensors) == set(tensors)
    for name, tensor in tensors.items():
        got = loaded.tensors[name]
        assert got.dtype == tensor.dtype and got.shape == tensor.shape, name
        assert torch.equal(got, tensor), name
    assert loaded.optimizer_state is None and loaded.trainer_state is None
    assert loaded.adapter_config is None
    assert sorted(p.name for p in Path(uri).iterdir()) == ["manifest.json", "model.safetensors"]


def test_resumed_training_is_bit_identical_to_never_stopping(tmp_path):
    seed_all(0)
    reference = tiny_model()
    ref_opt = adamw(reference)
    train(reference, ref_opt, 6)

    seed_all(0)
    model = tiny_model()
    opt = adamw(model)
    train(model, opt, 3)
    uri = save(
        tmp_path,
        3,
        tensors=model.state_dict(),
        optimizer_state=opt.state_dict(),
        trainer_state={"step": 3, "rng": capture_rng_state(), "metrics": {"loss": [0.5, 0.25]}},
    )
    del model, opt

    def resume(restore_rng: bool) -> nn.Module:
        seed_all(123)  # a fresh process: different init, different RNG position
        torch.rand(100)
        model = tiny_model()
        opt = adamw(model)
        loaded = load_checkpoint(uri)
        model.load_state_dict(loaded.tensors)
        opt.load_state_dict(loaded.optimizer_state)
        assert loaded.trainer_state is not None
        assert loaded.trainer_state["step"] == 3
        assert loaded.trainer_state["metrics"] == {"loss": [0.5, 0.25]}
        if restore_rng:
            restore_rng_state(loaded.trainer_state["rng"])
        train(model, opt, 3)
        return model

    resumed = resume(restore_rng=True)
    for (name, want), got in zip(
        reference.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(want, got), name
    diverged = resume(restore_rng=False)  # the test has teeth: RNG state matters here
    assert not all(
        torch.equal(a, b)
        for a, b in zip(reference.parameters(), diverged.parameters(), strict=True)
    )


def test_rng_state_round_trips_through_trainer_json(tmp_path):
    seed_all(5)
    torch.rand(7)
    uri = save(tmp_path, 1, trainer_state={"rng": capture_rng_state()})
    expected = (torch.rand(4), random.random(), np.random.rand(3))
    seed_all(99)
    restore_rng_state(load_checkpoint(uri).trainer_state["rng"])  # type: ignore[index]
    got = (torch.rand(4), random.random(), np.random.rand(3))
    assert torch.equal(expected[0], got[0])
    assert expected[1] == got[1]
    assert np.array_equal(expected[2], got[2])
    json.dumps(capture_rng_state())  # JSON-ready as it is


def test_lora_folder_is_loadable_by_peft_names(tmp_path):
    adapter = {"base_model.model.q_proj.lora_A.weight": torch.randn(4, 8).to(torch.bfloat16)}
    config = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}
    uri = save(tmp_path, 2, tensors=adapter, kind="lora", adapter_config=config)
    names = sorted(p.name for p in Path(uri).iterdir())
    assert names == ["adapter_config.json", "adapter_model.safetensors", "manifest.json"]
    loaded = load_checkpoint(uri)
    assert loaded.info.kind == "lora" and loaded.adapter_config == config
    key = next(iter(adapter))
    assert torch.equal(loaded.tensors[key], adapter[key])
    with pytest.raises(ValueError, match="kind"):
        save(tmp_path, 3, kind="adapter")


def test_saving_a_step_again_replaces_it(tmp_path):
    save(tmp_path, 1, tensors={"w": torch.zeros(3)}, optimizer_state={"state": {}})
    save(tmp_path, 1, tensors={"w": torch.ones(3)})
    loaded = load_checkpoint(f"{tmp_path}/step-00000001")
    assert torch.equal(loaded.tensors["w"], torch.ones(3)) and loaded.optimizer_state is None
    assert not (tmp_path / "step-00000001" / "optimizer.pt").exists()


def test_empty_root(tmp_path):
    assert list_checkpoints(str(tmp_path / "absent")) == []
    assert latest_checkpoint(str(tmp_path / "absent")) is None
    assert prune_checkpoints(str(tmp_path / "absent"), keep_last=1) == []


def test_config_hash_is_canonical():
    h = config_hash(TrainingConfig())
    assert len(h) == 16 and int(h, 16) >= 0
    assert h == config_hash(TrainingConfig.model_validate({"lr": 1e-6}))
    assert h != config_hash(TrainingConfig(lr=2e-6))


# ----------------------------------------------------------------------------- (d) corruption


def test_flipped_byte_is_skipped_and_refused(tmp_path, caplog):
    save(tmp_path, 1)
    uri = save(tmp_path, 2, optimizer_state={"state": {}, "param_groups": []})
    weights = Path(uri) / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, different content
    weights.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="spade.inference.checkpoints"):
        assert [c.step for c in list_checkpoints(str(tmp_path))] == [1]
    assert "step-00000002/model.safetensors: sha256 differs" in caplog.text
    assert latest_checkpoint(str(tmp_path)).step == 1  # type: ignore[union-attr]
    assert [c.step for c in list_checkpoints(str(tmp_path), verify="size")] == [1, 2]
    with pytest.raises(CheckpointError, match="sha256"):
        load_checkpoint(uri)


@pytest.mark.parametrize(
    "damage", ["missing_file", "truncated_file", "no_manifest", "torn_manifest"]
)
def test_damaged_checkpoint_is_skipped_and_refused(tmp_path, caplog, damage):
    save(tmp_path, 1)
    uri = save(tmp_path, 2, optimizer_state={"state": {}, "param_groups": []})
    folder = Path(uri)
    if damage == "missing_file":
        (folder / "optimizer-rank-00000-of-00001.pt").unlink()
    elif damage == "truncated_file":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[:-10])
    elif damage == "no_manifest":
        (folder / "manifest.json").unlink()
    else:
        text = (folder / "manifest.json").read_text()
        (folder / "manifest.json").write_text(text[: len(text) // 2])
    with caplog.at_level(logging.WARNING, logger="spade.inference.checkpoints"):
        assert [c.step for c in list_checkpoints(str(tmp_path))] == [1]
    assert "skipping checkpoint" in caplog.text and "step-00000002" in caplog.text
    with pytest.raises(CheckpointError):
        load_checkpoint(uri)


# ----------------------------------------------------------------------------- (e) parents, prune


def test_parent_chain_is_recorded(tmp_path):
    parent = None
    uris = []
    for step in (10, 20, 30):
        parent = save(tmp_path, step, parent=parent, config_hash="abc")
        uris.append(parent)
    infos = list_checkpoints(str(tmp_path))
    assert [i.parent for i in infos] == [None, uris[0], uris[1]]
    assert [i.uri for i in infos] == uris and {i.config_hash for i in infos} == {"abc"}
    manifest = json.loads((Path(uris[2]) / "manifest.json").read_text())
    assert manifest["parent"] == uris[1] and manifest["format"] == 2
    assert manifest["world_size"] == 1
    assert set(manifest) == {
        "format", "step", "kind", "config_hash", "parent", "created", "world_size", "files"
    }  # fmt: skip


def test_prune_keeps_newest_and_in_progress_saves(tmp_path):
    for step in (1, 2, 3, 4, 5, 6):
        save(tmp_path, step)
    (tmp_path / "step-00000003" / "manifest.json").unlink()  # a crashed save, older
    (tmp_path / "step-00000006" / "manifest.json").unlink()  # newer: maybe still being written
    deleted = prune_checkpoints(str(tmp_path), keep_last=2)
    assert deleted == [f"{tmp_path}/step-0000000{s}" for s in (1, 2, 3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"step-0000000{s}" for s in (4, 5, 6)]
    assert prune_checkpoints(str(tmp_path), keep_last=1) == [f"{tmp_path}/step-00000004"]
    assert latest_checkpoint(str(tmp_path)).step == 5  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        prune_checkpoints(str(tmp_path), keep_last=0)


# ----------------------------------------------------------------------------- (c) kill mid-save

CHILD = """
import json, sys, time, torch
import spade.training.checkpoint as checkpoint
root, parent, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
g = torch.Generator().manual_seed(0)
tensors = {f"w{i}": torch.randn(256, 256, generator=g) for i in range(4)}
optim = {"state": {i: {"exp_avg": torch.randn(256, 256, generator=g)} for i in range(4)},
         "param_groups": [{"lr": 1e-3, "params": list(range(4))}]}

def stop_here(*args, **kwargs):  # the weights are written; the optimizer, manifest are not
    print("mid-save", flush=True)
    time.sleep(600)  # killed here

checkpoint.save_torch = stop_here
checkpoint.save_checkpoint(root, 2, tensors=tensors, kind="full", optimizer_state=optim,
                           trainer_state={"step": 2}, parent=parent, storage_options=opts)
"""


def kill_mid_save(root: str, parent: str, opts: dict, started) -> None:
    """Run CHILD, which stops mid-save (its weights written, its optimizer state, trainer state
    and manifest not) and says so; SIGKILL it there. No race with the save finishing: the child
    cannot get past that point, and ``started()`` must see the step-2 folder's files."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, root, parent, json.dumps(opts)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "mid-save\n"
        assert started()  # a partly written step 2 is what the kill leaves behind
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def check_after_kill(root: str, opts: dict, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="spade.inference.checkpoints"):
        assert [c.step for c in list_checkpoints(root, opts)] == [1]
    assert "step-00000002" in caplog.text and "no manifest.json" in caplog.text
    latest = latest_checkpoint(root, opts)
    assert latest is not None and latest.step == 1
    loaded = load_checkpoint(latest.uri, storage_options=opts)
    assert torch.equal(loaded.tensors["w"], torch.full((4,), 1.0))
    assert prune_checkpoints(root, keep_last=1, storage_options=opts) == []  # newer: in progress?
    resumed = _save(root, 3, tensors={"w": torch.ones(2)}, kind="full", storage_options=opts)
    deleted = prune_checkpoints(root, keep_last=1, storage_options=opts)
    assert [d.rsplit("/", 1)[-1] for d in deleted] == ["step-00000001", "step-00000002"]
    assert [c.uri for c in list_checkpoints(root, opts)] == [resumed]


def test_kill_during_local_save_keeps_previous(tmp_path, caplog):
    first = save(tmp_path, 1)
    partial = tmp_path / "step-00000002"
    kill_mid_save(str(tmp_path), first, {}, lambda: partial.is_dir() and any(partial.iterdir()))
    assert not (partial / "manifest.json").exists()
    check_after_kill(str(tmp_path), {}, caplog)


# ----------------------------------------------------------------------------- (b) real S3 (moto)


@pytest.fixture
def s3(s3_bucket):
    """Root URL, client, bucket name and storage options of a fresh bucket."""
    b = s3_bucket
    return f"s3://{b.name}/runs/agent", b.client, b.name, b.storage_options


def test_s3_round_trip_list_latest_prune(s3, caplog):
    root, client, bucket, opts = s3
    seed_all(0)
    model = tiny_model()
    opt = adamw(model)
    train(model, opt, 2)
    tensors = {**model.state_dict(), "bf16": torch.randn(3, 3).to(torch.bfloat16)}
    parent = None
    for step in (1, 2, 3):
        parent = _save(
            root,
            step,
            tensors=tensors,
            kind="full",
            optimizer_state=opt.state_dict(),
            trainer_state={"step": step, "rng": capture_rng_state()},
            config_hash="cafe",
            parent=parent,
            storage_options=opts,
        )
    assert parent == f"{root}/step-00000003"
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert "runs/agent/step-00000003/manifest.json" in keys
    assert not any(".tmp-" in k for k in keys)  # object stores: direct PUTs, no renames

    loaded = load_checkpoint(parent, storage_options=opts)
    for name, tensor in tensors.items():
        assert loaded.tensors[name].dtype == tensor.dtype and torch.equal(
            loaded.tensors[name], tensor
        )
    resumed = adamw(tiny_model())
    resumed.load_state_dict(loaded.optimizer_state)
    assert torch.equal(
        resumed.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"]
    )
    assert loaded.trainer_state["step"] == 3 and loaded.info.parent == f"{root}/step-00000002"  # type: ignore[index]

    infos = list_checkpoints(root, opts)
    assert [i.step for i in infos] == [1, 2, 3] and infos[1].parent == infos[0].uri
    shard = "optimizer-rank-00000-of-00001.pt"
    client.delete_object(Bucket=bucket, Key=f"runs/agent/step-00000003/{shard}")
    with caplog.at_level(logging.WARNING, logger="spade.inference.checkpoints"):
        assert latest_checkpoint(root, opts).step == 2  # type: ignore[union-attr]
    assert f"step-00000003/{shard}: missing" in caplog.text
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(parent, storage_options=opts)
    save_checkpoint_again = _save(root, 4, tensors=tensors, kind="full", storage_options=opts)
    deleted = prune_checkpoints(root, keep_last=2, storage_options=opts)
    assert deleted == [f"{root}/step-00000001", f"{root}/step-00000003"]
    assert [i.uri for i in list_checkpoints(root, opts)] == [
        f"{root}/step-00000002",
        save_checkpoint_again,
    ]


def test_kill_during_s3_save_keeps_previous(s3, caplog):
    root, client, bucket, opts = s3
    first = _save(root, 1, tensors={"w": torch.full((4,), 1.0)}, kind="full", storage_options=opts)

    def started() -> bool:  # on S3 the folder appears with its first object (the weights)
        listing = client.list_objects_v2(Bucket=bucket, Prefix="runs/agent/step-00000002/")
        return listing["KeyCount"] > 0

    kill_mid_save(root, first, opts, started)
    listing = client.list_objects_v2(Bucket=bucket, Prefix="runs/agent/step-00000002/")
    assert "runs/agent/step-00000002/manifest.json" not in {o["Key"] for o in listing["Contents"]}
    check_after_kill(root, opts, caplog)
