"""A schedule's ticks continue a named campaign: each run with ``more_rounds`` appends the
next rounds to it, and a tick that overlaps a running one is refused at once with an error
naming the running flow run (the campaign's lease; a deployment's concurrency limit makes
ticks wait before they get that far)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from flows.campaign import campaign_flow
from spade.config import load_config
from spade.errors import ConfigError, LeaseHeldError
from spade.pipeline.campaign import (
    campaign_info,
    record_target,
    recorded_target,
    round_complete,
    rounds_to_run,
)
from spade.pipeline.record import campaign_store
from spade.testing.openai_server import FakeOpenAIServer
from spade.testing.scripted_designer import ScriptedModel, round_overrides, write_corpus

pytestmark = pytest.mark.sandbox
REPO_ROOT = Path(__file__).resolve().parents[2]
CID = "nightly"


class HeldModel(ScriptedModel):
    """The scripted model, whose answers wait until the test lets them go: a tick that asked
    for one is mid-round, holding the campaign."""

    def __init__(self) -> None:
        super().__init__()
        self.asked, self.go = threading.Event(), threading.Event()

    def __call__(self, request: dict[str, Any]) -> str:
        self.asked.set()
        self.go.wait(600)  # a hang guard only: the test sets it
        return super().__call__(request)


def _tick_in_a_child(config_file: Path, api_url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.flows.tick_driver", str(config_file), CID, "1"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_ticks_append_rounds_to_one_campaign_and_an_overlapping_tick_is_refused(
    prefect_api, tmp_path
):
    model = HeldModel()
    with FakeOpenAIServer(script=model) as server:
        overrides = round_overrides(server, write_corpus(tmp_path / "corpus.jsonl"))
        cfg = load_config(
            overrides={**overrides, "storage.root": str(tmp_path / "store"), "run.train": False}
        )
        cs = campaign_store(cfg, CID)
        config_file = tmp_path / "config.json"
        config_file.write_text(cfg.model_dump_json())
        first = _tick_in_a_child(config_file, prefect_api)
        try:  # the first tick is mid-round (its designer waits) while a second one starts
            assert model.asked.wait(300), "the first tick never asked the model"
            overlap = asyncio.run(
                campaign_flow(config=cfg, campaign_id=CID, more_rounds=1, return_state=True)
            )
        finally:
            model.go.set()
            _, stderr = first.communicate()
        assert first.returncode == 0, stderr.decode()[-3000:]
        assert overlap.is_failed()
        with pytest.raises(LeaseHeldError) as refused:
            overlap.result()
        message = str(refused.value)
        assert f"campaign {CID!r} is held by flow run {CID!r}" in message  # the first tick
        assert f"pid {first.pid} on" in message
        assert cs.rounds() == [0] and round_complete(cs, 0)
        created = campaign_info(cs)["created"]

        asyncio.run(campaign_flow(config=cfg, campaign_id=CID, more_rounds=1))  # the next tick
    assert cs.rounds() == [0, 1]
    assert round_complete(cs, 0) and round_complete(cs, 1)
    assert campaign_info(cs)["created"] == created  # the same campaign, continued


def test_rounds_to_run_counts_from_where_the_campaign_is(tmp_path):
    cfg = load_config(overrides={"storage.root": str(tmp_path), "run.rounds": 5})
    cs = campaign_store(cfg, "fresh")
    assert rounds_to_run(cs, cfg) == (0, 5)
    assert rounds_to_run(cs, cfg, rounds=2) == (0, 2)
    assert rounds_to_run(cs, cfg, more_rounds=3) == (0, 3)
    with pytest.raises(ConfigError, match="give one"):
        rounds_to_run(cs, cfg, rounds=2, more_rounds=1)
    with pytest.raises(ConfigError, match="at least 1"):
        rounds_to_run(cs, cfg, more_rounds=0)
    record_target(cs, 1)  # what a run was asked for is what its resume continues to
    assert rounds_to_run(cs, cfg) == (0, 1) and recorded_target(cs) == 1
    assert rounds_to_run(cs, cfg, rounds=3) == (0, 3)  # unless told otherwise
