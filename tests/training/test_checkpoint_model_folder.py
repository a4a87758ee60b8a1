"""A full checkpoint is a Hugging Face model folder (config, generation config, tokenizer,
weights) covered by its manifest; checkpoints are staged to local folders for servers that
read only their own disk (from a real S3 endpoint, moto)."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: never the hub

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from spade.config import TrainingConfig
from spade.errors import CheckpointError
from spade.inference.checkpoints import (
    list_checkpoints,
    load_checkpoint,
    local_checkpoint_path,
    stage_checkpoint,
)
from spade.training.checkpoint import save_checkpoint
from spade.training.trainer import GRPOTrainer
from spade.training.weights import hf_model_files
from tests.training.model_folder import assert_model_folder
from tests.training.tiny_task import task_samples


def _trained_checkpoint(tiny_policy: Path, root: str, **kw: object) -> tuple[str, GRPOTrainer]:
    model = AutoModelForCausalLM.from_pretrained(tiny_policy)
    tokenizer = AutoTokenizer.from_pretrained(tiny_policy)
    files = hf_model_files(model, tokenizer)
    trainer = GRPOTrainer(model, tokenizer.pad_token_id, TrainingConfig(lr=1e-2))
    trainer.step(task_samples(trainer.model))
    state = trainer.state_dict()
    optimizer = state.pop("optimizer")
    uri = save_checkpoint(
        root,
        trainer.global_step,
        tensors=trainer.export_weights(merged=False),
        kind="full",
        optimizer_state=optimizer,
        trainer_state=state,
        model_files=files,
        **kw,  # type: ignore[arg-type]
    )
    return uri, trainer


def test_a_full_checkpoint_loads_as_a_transformers_model_with_the_trained_weights(
    tiny_policy: Path, tmp_path: Path
) -> None:
    uri, trainer = _trained_checkpoint(tiny_policy, str(tmp_path / "ckpt"))
    folder = Path(uri)
    manifest = json.loads((folder / "manifest.json").read_text())
    for name in ("config.json", "generation_config.json", "tokenizer.json", "model.safetensors"):
        assert manifest["files"][name]["bytes"] == (folder / name).stat().st_size, name

    trained = trainer.export_weights()
    assert_model_folder(folder, trained, tiny_policy)
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    # the resume path still reads it, and the extra files are checked like every other
    assert torch.equal(load_checkpoint(uri).tensors["lm_head.weight"], trained["lm_head.weight"])
    (folder / "tokenizer.json").write_text("{}")
    assert list_checkpoints(str(tmp_path / "ckpt")) == []
    with pytest.raises(CheckpointError, match=r"tokenizer\.json"):
        load_checkpoint(uri)


@pytest.mark.parametrize(
    "name",
    [
        "manifest.json",
        "optimizer.pt",
        "optimizer-rank-00000-of-00001.pt",
        "model-00001-of-00002.safetensors",
        "model.safetensors.index.json",
        "../config.json",
        "a/b",
        ".x",
    ],
)
def test_model_files_must_be_plain_new_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="plain and new"):
        save_checkpoint(
            str(tmp_path), 1, tensors={"w": torch.ones(2)}, kind="full", model_files={name: b"x"}
        )
    assert not (tmp_path / "step-00000001").exists()


def test_a_checkpoint_on_s3_is_staged_verified_into_a_local_model_folder(
    tiny_policy: Path, tmp_path: Path, s3_bucket
) -> None:
    b = s3_bucket
    root = f"s3://{b.name}/runs"
    uri, trainer = _trained_checkpoint(tiny_policy, root, storage_options=b.storage_options)
    assert local_checkpoint_path(uri, b.storage_options) is None
    assert local_checkpoint_path(str(tmp_path)) == tmp_path

    staged = stage_checkpoint(uri, tmp_path / "staged" / "v1", storage_options=b.storage_options)
    assert staged == tmp_path / "staged" / "v1"
    names = sorted(p.name for p in staged.iterdir())
    assert "optimizer.pt" not in names and "trainer.json" not in names
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(names)
    assert sorted(p.name for p in staged.parent.iterdir()) == ["v1"]  # no temporary left
    model = AutoModelForCausalLM.from_pretrained(staged)
    for key, value in trainer.export_weights().items():
        assert torch.equal(model.state_dict()[key], value), key
    assert stage_checkpoint(uri, staged, storage_options=b.storage_options) == staged  # reused

    key = f"runs/{uri.rsplit('/', 1)[-1]}/config.json"
    b.client.put_object(Bucket=b.name, Key=key, Body=b"{}")  # damaged on the store
    with pytest.raises(CheckpointError, match=r"config\.json"):
        stage_checkpoint(uri, tmp_path / "staged" / "v2", storage_options=b.storage_options)
    assert sorted(p.name for p in staged.parent.iterdir()) == ["v1"]  # nothing half-copied
