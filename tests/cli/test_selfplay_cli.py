"""``spade design`` and ``spade evaluate`` as a user runs them, against the scripted stand-in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter

import pytest
import yaml

from spade.config import load_config
from spade.testing.openai_server import FakeOpenAIServer
from spade.testing.scripted_designer import METAL, SKY, write_corpus, write_tiny_policy

pytestmark = pytest.mark.sandbox


def spade(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spade.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"COLUMNS": "200"},  # wide enough that table cells are not cut
    )


@pytest.fixture
def config(tmp_path, scripted_server):
    server = scripted_server
    settings = {
        "inference": {"backend": "openai", "base_url": server.url, "served_model": server.model},
        "corpus": {"path": str(write_corpus(tmp_path / "corpus.jsonl"))},
        "designer": {"envs_per_round": 3, "attempts_per_slot": 1},
        "evaluation": {"unhinted_plays": 2, "hinted_plays": 2},
        "sandbox": {"verify": {"waive": ["seed_dependence"]}},  # the script's fixed instances
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def test_design_evaluate_then_train_both_roles(config, tmp_path):
    """The commands chained as a user would: a batch designed, its environments played, and
    one GRPO update of each role from those files (a tiny random policy stands in for the
    served model: its vocabulary covers the stand-in's token ids)."""
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
    _train_both_roles(config, out, tmp_path)


def _train_both_roles(config, batch, tmp_path) -> None:
    settings = yaml.safe_load(config.read_text()) | {
        "model": {"name_or_path": str(write_tiny_policy(tmp_path / "tiny")), "dtype": "float32"},
        "storage": {"root": str(tmp_path / "store")},
        "scoring": {"centre_per_skill": False},  # one design per skill: centre over the batch
        "training": {"lr": 1e-3, "designer_lr": 1e-3},
    }
    train_config = tmp_path / "train.yaml"
    train_config.write_text(yaml.safe_dump(settings))
    attempts, evals = batch / "attempts.jsonl", tmp_path / "eval" / "evaluations.jsonl"
    base = ("train", "--config", str(train_config))
    run = spade(*base, "--role", "designer", "--trajectories", str(attempts))
    assert run.returncode == 2 and "--evaluations" in run.stderr  # rewards need the plays
    run = spade(*base, "--role", "designer", "-t", str(attempts), "--evaluations", str(evals))
    assert run.returncode == 0, run.stderr
    assert "designer update on 3 samples" in run.stdout and "checkpoint:" in run.stdout
    run = spade(*base, "--role", "agent", "-t", str(tmp_path / "eval" / "trajectories.jsonl"))
    assert run.returncode == 0, run.stderr
    again = spade(*base, "--role", "agent", "-t", str(tmp_path / "eval" / "trajectories.jsonl"))
    assert again.returncode == 0 and "(parent " in again.stdout  # resumed the newest
    # one chain for both roles: designer (step 1) -> agent (2) -> agent (3), each the parent
    (step1, step2, step3) = sorted((tmp_path / "store" / "spade" / "checkpoints").iterdir())
    for parent, child in ((step1, step2), (step2, step3)):
        manifest = json.loads((child / "manifest.json").read_text())
        assert manifest["parent"].endswith(parent.name) and manifest["kind"] == "full"
    # a full fine-tune's checkpoint is a model folder (config and tokenizer beside the weights)
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= {
        p.name for p in step3.iterdir()
    }


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


class LeakyHinter:
    """Hints that give the answer away: always for the sky word, only at first for the metal.
    The agent answers each environment correctly."""

    def __init__(self) -> None:
        self.hint_requests: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, request: dict) -> str:
        messages = request["messages"]
        if messages[0]["content"].startswith("You coach"):
            word = "azure" if "azure" in messages[1]["content"] else "cobalt"
            with self.lock:
                self.hint_requests[word] += 1
                n = self.hint_requests[word]
            if word == "cobalt" and n > 1:
                return "Hint: It is a blue-tinged transition metal."
            return f"Just answer {word}."
        first = messages[1]["content"]
        return "\\boxed{azure}" if first.startswith("Name the secret") else "\\boxed{cobalt}"


def test_evaluate_hints_that_leak_the_solution_are_retried_then_dropped(tmp_path):
    sky, metal = tmp_path / "sky.py", tmp_path / "metal.py"  # no .hint.txt, no class hint
    sky.write_text(SKY)
    metal.write_text(METAL)
    hinter = LeakyHinter()
    with FakeOpenAIServer(script=hinter) as server:
        config = tmp_path / "c.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "inference": {
                        "backend": "openai",
                        "base_url": server.url,
                        "served_model": server.model,
                    },
                    "evaluation": {"unhinted_plays": 2, "hinted_plays": 3},
                }
            )
        )
        out = tmp_path / "eval"
        run = spade("evaluate", "--config", str(config), "--out", str(out), str(sky), str(metal))
    assert run.returncode == 0, run.stderr
    tries = load_config().designer.hint_tries
    assert tries >= 2 and hinter.hint_requests == {"azure": tries, "cobalt": 2}

    rows = {
        r["path"]: r for r in map(json.loads, (out / "evaluations.jsonl").read_text().splitlines())
    }
    dropped, kept = rows[str(sky)], rows[str(metal)]
    assert dropped["hint"] is None and dropped["hint_note"] == "hint revealed the solution"
    assert dropped["hinted_returns"] == [] and dropped["hinted_win_rate"] is None
    assert dropped["unhinted_returns"] == [1.0, 1.0] and dropped["regret"] == 0.0
    assert kept["hint"] == "It is a blue-tinged transition metal." and kept["hint_note"] is None
    assert kept["hinted_returns"] == [1.0] * 3 and kept["hinted_win_rate"] == 1.0

    trajs = [json.loads(r) for r in (out / "trajectories.jsonl").read_text().splitlines()]
    assert Counter((t["env_id"] == dropped["env_id"], t["hinted"]) for t in trajs) == {
        (True, False): 2,
        (False, False): 2,
        (False, True): 3,
    }
    assert "sky.py: no hint (hint revealed the solution)" in run.stdout
    # The regret table shows no hinted win rate (and no hinted mean) rather than 0.
    (sky_row,) = [line for line in run.stdout.splitlines() if "sky.py" in line and "│" in line]
    cells = [c.strip() for c in sky_row.strip("│ ").split("│")]
    # no hint: no paired regret either ("–", before the failed plays)
    assert cells == ["sky.py", "mathematical_reasoning", "1.00", "–", "1.000", "–", "0.000", "–", "0"]  # fmt: skip
    (metal_row,) = [line for line in run.stdout.splitlines() if "metal.py" in line and "│" in line]
    assert [c.strip() for c in metal_row.strip("│ ").split("│")][3] == "1.00"


def test_design_shows_strategy_and_repairs_and_writes_them(tmp_path):
    """``spade design`` with the edit strategy (the bundled examples as the pool, one held
    out) and a design that is accepted only after its repair turn."""
    from spade.designer.prompts import contract_references
    from tests.designer.test_design_batch import (
        BACKWARDS,
        CODE_BREAKER,
        EXAMPLES,
        LOGIC,
        MATH,
        STUBBORN,
        Script,
        fenced,
    )
    from tests.designer.test_design_batch import write_corpus as write_docs

    script = Script(
        {MATH: [fenced(BACKWARDS)], LOGIC: [fenced(STUBBORN)]},
        repairs={MATH: [fenced(CODE_BREAKER)]},
    )
    with FakeOpenAIServer(script=script) as server:
        settings = {
            "inference": {
                "backend": "openai",
                "base_url": server.url,
                "served_model": server.model,
            },
            "corpus": {"path": str(write_docs(tmp_path / "corpus.jsonl"))},
            "designer": {"envs_per_round": 2, "attempts_per_slot": 1, "strategy": "edit"},
            "run": {"heldout_envs": [str(EXAMPLES / "code_breaker.py")]},
        }
        path = tmp_path / "edit.yaml"
        path.write_text(yaml.safe_dump(settings))
        run = spade("design", "--config", str(path), "--out", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr
    assert "2 of 2 attempts accepted (1 after a repair turn); strategy: 2 edit" in run.stdout
    assert "accepted after 1 repair (first: infeasible)" in run.stdout
    assert "edit polynomial_probe" in run.stdout  # the maths slot's parent
    rows = [json.loads(r) for r in (tmp_path / "out" / "attempts.jsonl").read_text().splitlines()]
    maths, logic = rows
    assert (maths["strategy"], maths["parent_id"]) == ("edit", "polynomial_probe")
    assert maths["accepted_after_repair"] and maths["first_failure_kind"] == "infeasible"
    assert logic["accepted"] and not logic["accepted_after_repair"] and logic["parent_id"]
    # the contract's format example is a reference of every game design, then the parent
    assert all(
        r["references"]
        == [
            *contract_references(tool_use=False),
            {"name": r["parent_id"], "code": (EXAMPLES / f"{r['parent_id']}.py").read_text()},
        ]
        for r in rows
    )
