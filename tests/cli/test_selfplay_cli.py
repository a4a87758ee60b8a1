"""``spade design`` and ``spade evaluate`` as a user runs them, against the scripted stand-in."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.integration.scripted_designer import write_corpus

pytestmark = pytest.mark.sandbox


def spade(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spade.cli", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def config(tmp_path, scripted_server):
    server = scripted_server
    settings = {
        "inference": {"backend": "openai", "base_url": server.url, "served_model": server.model},
        "corpus": {"path": str(write_corpus(tmp_path / "corpus.jsonl"))},
        "designer": {"envs_per_round": 3, "attempts_per_slot": 1},
        "evaluation": {"unhinted_plays": 2, "hinted_plays": 2},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def test_design_then_evaluate(config, tmp_path):
    out = tmp_path / "batch"
    run = spade("design", "--config", str(config), "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert "3 of 3 attempts accepted" in run.stdout
    envs = sorted((out / "envs").glob("*.py"))
    assert len(envs) == 3 and all(p.with_suffix(".hint.txt").is_file() for p in envs)
    assert len((out / "attempts.jsonl").read_text().splitlines()) == 3
    assert (out / "config.yaml").is_file()

    run = spade(
        "evaluate", "--config", str(config), "--out", str(tmp_path / "eval"), *map(str, envs)
    )
    assert run.returncode == 0, run.stderr
    assert "Regret" in run.stdout
    rows = [
        json.loads(r) for r in (tmp_path / "eval" / "evaluations.jsonl").read_text().splitlines()
    ]
    assert sorted(r["regret"] for r in rows) == [0.0, 0.5, 1.0]
    assert len((tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()) == 3 * 4


def test_bad_inputs_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("designer: {envs_per_round: 0}\n")
    run = spade("design", "--config", str(bad), "--out", str(tmp_path / "o"))
    assert run.returncode == 2 and "designer.envs_per_round" in run.stderr
    missing = tmp_path / "nocorpus.yaml"
    missing.write_text(
        yaml.safe_dump(
            {"corpus": {"path": str(tmp_path / "absent.jsonl")}, "inference": {"backend": "openai"}}
        )
    )
    run = spade("design", "--config", str(missing), "--out", str(tmp_path / "o"))
    assert run.returncode == 2 and "corpus not found" in run.stderr
    run = spade("evaluate", str(tmp_path / "absent_env.py"))
    assert run.returncode == 2
