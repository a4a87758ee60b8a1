"""``spade doctor`` on CPU: the GPU requirement is enforced, and a CPU config goes through the
same steps a GPU node runs (no managed vLLM here: the slow shrunk-preset test covers that)."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: never the hub

import pytest
from typer.testing import CliRunner

from spade.cli import app
from spade.config import load_config
from spade.testing.scripted_designer import write_tiny_policy
from spade.training.doctor import run_doctor


def _config(tmp_path: Path) -> Path:
    policy = write_tiny_policy(tmp_path / "policy")
    path = tmp_path / "cpu.yaml"
    path.write_text(
        json.dumps(
            {
                "name": "doctor-cpu",
                "model": {"name_or_path": str(policy), "device": "cpu", "max_context_tokens": 256},
                "training": {"micro_batch_tokens": 128, "lr": 1e-3},
                "storage": {"root": str(tmp_path / "store")},
            }
        )
    )
    return path


def test_gpu_refuses_a_node_without_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this process sees no GPU, whatever the node
    result = CliRunner().invoke(app, ["doctor", "--gpu", str(_config(tmp_path))])
    assert result.exit_code == 1
    assert "after 0 check(s)" in result.output and "no visible GPU" in result.output


def test_a_cpu_config_trains_resumes_from_its_checkpoint_and_says_what_it_skipped(tmp_path):
    cfg = load_config(_config(tmp_path))
    checks = run_doctor(cfg, gpu=False)
    names = [c.name for c in checks]
    assert names == ["devices", "plan", "serve", "train", "resume", "republish"]
    by = {c.name: c for c in checks}
    assert by["plan"].detail == "no GPU used: nothing to plan"
    assert by["serve"].detail.startswith("inference.backend transformers")
    trained, resumed = by["train"].figures, by["resume"].figures
    assert trained["peak_memory_rank0"] > 0  # the process's peak resident memory on CPU
    manifest = json.loads((Path(resumed["checkpoint"]) / "manifest.json").read_text())
    assert manifest["parent"] == trained["checkpoint"] and manifest["step"] == 2
    assert "256 tokens" in by["train"].detail  # the config's longest sample


@pytest.mark.parametrize("flag", ["--gpu", None])
def test_the_command_exists_with_its_flags(flag):
    args = ["doctor", "--help"] if flag is None else ["doctor", flag, "--help"]
    assert CliRunner().invoke(app, args).exit_code == 0
