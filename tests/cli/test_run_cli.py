"""``spade run``, ``status``, ``resume`` and ``stop`` as a user runs them (the ``spade`` console
script, Prefect's embedded local server in a private PREFECT_HOME), and the one clear error
each kind of bad input gives before any work starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from spade.cli.progress import CampaignProgress, StageLog
from spade.pipeline.context import RoundContext
from spade.pipeline.record import StageRecord, campaign_store
from spade.storage import CampaignStore, ObjectStore
from spade.testing.scripted_designer import round_overrides, write_corpus
from tests.prefect_db import home_env

SPADE = str(Path(sys.executable).with_name("spade"))


def spade(*args: str, home: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The console script on the embedded server of ``home`` (its database made migrated:
    tests/prefect_db.py)."""
    env = home_env(home)
    return subprocess.run([SPADE, *args], capture_output=True, text=True, timeout=timeout, env=env)


def _nested(overrides: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for dotted, value in overrides.items():
        node = out
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})  # type: ignore[assignment]
        node[leaf] = value
    return out


def _write(path: Path, overrides: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(_nested(overrides)))
    return path


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"evaluation.hinted_plays": -3}, "evaluation.hinted_plays"),
        ({"corpus.path": "/nowhere/corpus.jsonl"}, "corpus.path"),
        (
            {
                "storage.root": "s3://spade-nowhere/x",
                "storage.storage_options": {
                    "endpoint_url": "http://127.0.0.1:9",
                    "key": "k",
                    "secret": "s",
                },
            },
            "storage.root",
        ),
        ({"model.name_or_path": "/nowhere/model"}, "model.name_or_path"),
    ],
    ids=["invalid-config", "missing-corpus", "unreachable-store", "model-cannot-load"],
)
def test_bad_input_is_one_clear_error_before_any_work(tmp_path, overrides, expected):
    root = tmp_path / "store"
    config = _write(tmp_path / "c.yaml", {"storage.root": str(root), **overrides})
    done = spade("run", "--config", str(config), "--no-live", home=tmp_path / "prefect")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error:" in done.stderr and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (root / "campaign").exists()  # nothing ran


@pytest.mark.sandbox
def test_run_status_resume_on_the_embedded_prefect(tmp_path, scripted_server):
    root = tmp_path / "store"
    overrides = round_overrides(scripted_server, write_corpus(tmp_path / "corpus.jsonl"))
    config = _write(
        tmp_path / "c.yaml",
        {**overrides, "storage.root": str(root), "run.train": False, "run.rounds": 1},
    )
    home = tmp_path / "prefect"
    done = spade("run", "--config", str(config), "--campaign-id", "cli1", home=home)
    assert done.returncode == 0, done.stdout + done.stderr

    assert "spade resume cli1" in done.stdout and "Completed" in done.stdout
    # a pipe is not a terminal: the live view is a line per stage as it commits
    # (of 5 designs one had no code: a parse failure, rejected before verification)
    assert "round 0 verify done: accepted 3, rejected 1" in done.stdout
    assert "round 0 train_agent done" in done.stdout and "round 0 heldout done" in done.stdout

    table = spade("status", "cli1", "--store", str(root), home=home)
    assert table.returncode == 0 and "designs" in table.stdout and "regret" in table.stdout
    assert "…" not in table.stdout  # fits an 80-column terminal (what a pipe gets) uncut
    status = spade("status", "cli1", "--store", str(root), "--json", home=home)
    info = json.loads(status.stdout)
    (round0,) = info["rounds"]
    assert round0["complete"] and round0["accepted"] == 3 and round0["attempts"] == 5
    assert round0["rejections"] == {"infeasible": 1, "parse": 1}

    requests = len(scripted_server.chat_requests)
    again = spade("resume", "cli1", "--store", str(root), "--no-live", home=home)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "round 0 heldout done" in again.stdout  # --no-live: still a line per stage
    assert len(scripted_server.chat_requests) == requests  # the round was complete

    unknown = spade("resume", "nope", "--store", str(root), "--no-live", home=home)
    assert unknown.returncode == 2 and "no campaign 'nope'" in unknown.stderr


@pytest.mark.sandbox
@pytest.mark.slow  # the same claim, in-process and faster: tests/flows/test_before_round_0.py
def test_run_on_a_server_without_the_gpu_limit_creates_it_before_round_0_and_trains(
    tmp_path, scripted_server
):
    """A GPU preset's `run.gpu_concurrency_limit` without `spade deploy` first: the embedded
    server of a fresh PREFECT_HOME has no limit; the run makes it with one slot, says so before
    round 0, and the round's training stages take their slot of it (strictly: a missing limit
    would fail them)."""
    from spade.testing.scripted_designer import tiny_policy_overrides, write_tiny_policy

    root = tmp_path / "store"
    overrides = round_overrides(scripted_server, write_corpus(tmp_path / "corpus.jsonl"))
    overrides |= tiny_policy_overrides(write_tiny_policy(tmp_path / "policy"))
    config = _write(
        tmp_path / "c.yaml",
        {
            **overrides,
            "storage.root": str(root),
            "model.device": "cpu",
            "run.rounds": 1,
            "run.gpu_concurrency_limit": "spade-gpu",
        },
    )
    done = spade(
        "run", "--config", str(config), "--campaign-id", "gpu1", "--no-live", home=tmp_path / "p"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    created = out.index("GPU concurrency limit spade-gpu: created with 1 slot")
    assert created < out.index("round 0 sample_documents done")  # before round 0
    assert "round 0 train_agent done" in out and "round 0 train_designer done" in out
    status = spade("status", "gpu1", "--store", str(root), "--json", home=tmp_path / "p")
    (round0,) = json.loads(status.stdout)["rounds"]
    assert round0["complete"] and round0["train_loss"] is not None  # trained, not skipped


@pytest.mark.attack
def test_a_second_run_of_a_running_campaign_is_one_clear_error(tmp_path):
    """Another process holds the campaign's lease: resume refuses, naming it, before any work."""
    from spade.config import load_config
    from spade.pipeline.campaign import LEASE_FILE, start_campaign
    from spade.storage.lease import Lease

    root = tmp_path / "store"
    cfg = load_config(overrides={"storage.root": str(root)})
    cs = start_campaign(campaign_store(cfg, "busy"), cfg)
    with Lease(cs.store, f"campaign/busy/{LEASE_FILE}", 600) as held:
        done = spade("resume", "busy", "--store", str(root), "--no-live", home=tmp_path / "p")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: campaign 'busy' is held by" in done.stderr and held.owner in done.stderr
    assert f"pid {os.getpid()}" in done.stderr and "Traceback" not in done.stderr
    assert cs.completed_stages(0) == []  # nothing ran


def test_live_view_renders_what_the_store_holds(tmp_path):
    from spade.config import load_config

    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    for stage in ("sample_documents", "design"):
        StageRecord(RoundContext.open(cfg, "view", 0), stage).commit()
    cs = CampaignStore(ObjectStore(str(tmp_path)), "view")
    key = cs.layout.stage_key(0, "verify", "verdicts/env-1.json")
    cs.store.write_json(key, {"failed_check": None})
    cs.store.write_json(key.replace("env-1", "env-2"), {"failed_check": "feasibility"})
    cs.store.write_bytes(
        cs.layout.stage_key(0, "pool", "environments.jsonl"), b'{"env_id": "env-9"}\n'
    )
    cs.store.write_json(
        cs.layout.stage_key(0, "evaluate", "envs/env-1/summary.json"),
        {"hinted_returns": [1.0, 0.0], "unhinted_returns": [0.0]},
    )
    console = Console(record=True, width=80)
    console.print(CampaignProgress(cs, rounds=2))
    text = console.export_text()
    assert "…" not in text  # fits 80 columns
    row = next(line for line in text.splitlines() if line.strip().startswith("0 "))
    # round, stage, designs ok/rejected, pool environments, plays; nothing scored yet
    assert row.split() == ["0", "verify", "1/1", "1", "3", "-", "-", "-", "-", "-", "-", "-"]


def test_stage_log_prints_each_committed_stage_once(tmp_path):
    from spade.config import load_config

    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    StageRecord(RoundContext.open(cfg, "log", 0), "sample_documents").commit()
    cs = CampaignStore(ObjectStore(str(tmp_path)), "log")
    lines: list[str] = []
    log = StageLog(CampaignProgress(cs, rounds=1), lines.append)
    log.step()
    assert [line.split("] ", 1)[1] for line in lines] == ["round 0 sample_documents done"]
    StageRecord(RoundContext.open(cfg, "log", 0), "design").commit()
    key = cs.layout.stage_key(0, "verify", "verdicts/env-1.json")
    cs.store.write_json(key, {"failed_check": "parse"})
    StageRecord(RoundContext.open(cfg, "log", 0), "verify").commit()
    log.view._polled = 0.0  # the view reads the store at most once a second
    log.step()
    assert [line.split("] ", 1)[1] for line in lines[1:]] == [
        "round 0 design done",
        "round 0 verify done: accepted 0, rejected 1",
    ]
    # the last step of a run reads the store again, however recently it was read: a stage that
    # committed in the run's last second is shown (it used to be lost to the view's rate limit)
    StageRecord(RoundContext.open(cfg, "log", 0), "hint").commit()
    log.step(final=True)
    assert lines[-1].split("] ", 1)[1] == "round 0 hint done"
