"""``spade benchmark`` as a user runs it: held-out suites against the OpenAI stand-in."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from spade.benchmarks.base import get_suite
from spade.testing.openai_server import FakeOpenAIServer
from tests.benchmarks.scripted import ActionScript, gold_actions

pytestmark = pytest.mark.sandbox


def spade(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spade.cli", *args], capture_output=True, text=True, timeout=300
    )


def _config(tmp_path, server, suites) -> str:
    settings = {
        "inference": {"backend": "openai", "base_url": server.url, "served_model": server.model},
        "evaluation": {"max_tokens_per_turn": 4096},  # the stand-in counts a token per char
        "run": {"heldout_suites": suites},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(settings))
    return str(path)


def test_benchmark_plays_the_configured_suites_and_writes_rows(tmp_path):
    tasks = get_suite("humaneval").tasks(2, 3, [])
    tasks += get_suite("reasoning_gym").tasks(2, 3, ["basic_arithmetic"])
    with FakeOpenAIServer(script=ActionScript(gold_actions(tasks))) as server:
        config = _config(
            tmp_path,
            server,
            [
                {"name": "humaneval", "size": 2, "seed": 3},
                {"name": "reasoning_gym", "size": 2, "seed": 3, "subsets": ["basic_arithmetic"]},
            ],
        )
        run = spade("benchmark", "--config", config, "--out", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr
    assert "humaneval" in run.stdout and "reasoning_gym" in run.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["humaneval"] == {
        "score": 1.0,
        "score_interval": [1.0, 1.0],
        "tasks": 2,
        "failed_plays": 0,
    }
    assert summary["reasoning_gym"]["score"] == 1.0
    rows = (tmp_path / "out" / "suites.jsonl").read_text().splitlines()
    assert len(rows) == 4 and all(json.loads(r)["score"] == 1.0 for r in rows)
    assert (tmp_path / "out" / "transcripts-humaneval.jsonl").exists()


def test_benchmark_rejects_bad_input(tmp_path):
    run = spade("benchmark", "--suite", "mmlu")
    assert run.returncode == 2 and "unknown suite 'mmlu'" in run.stderr
    run = spade("benchmark", "--suite", "humaneval", "--size", "0")
    assert run.returncode == 2 and "--size" in run.stderr
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {"run": {"heldout_suites": [{"name": "reasoning_gym", "subsets": ["countdown"]}]}}
        )
    )
    run = spade("benchmark", "--config", str(config))
    assert run.returncode == 2 and "countdown" in run.stderr and "parse_expr" in run.stderr
