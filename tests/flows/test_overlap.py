"""``run.overlap: 1``: a campaign runs round r+1's play half beside round r's training, served
by the newest weights published when it starts, its training continuing from round r's; the
store records which weights served each stage and how stale they were. On a temporary local
Prefect API with the scripted stand-in and a tiny random-weight policy."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from flows.campaign import campaign_flow
from flows.round import round_flow
from spade.config import load_config
from spade.errors import StorageError
from spade.pipeline import train as train_stages
from spade.pipeline.record import campaign_store
from spade.pipeline.state import published_weights
from spade.storage import STAGES
from spade.testing.scripted_designer import tiny_policy_overrides

pytestmark = pytest.mark.sandbox


def _config(overrides: dict[str, Any], root, tiny_policy, **more: Any):
    return load_config(
        overrides={
            **overrides,
            "name": "overlap",
            "storage.root": str(root),
            **tiny_policy_overrides(tiny_policy),
            **more,
        }
    )


def _pytest_timeout_s(request: pytest.FixtureRequest) -> float:
    """The seconds pytest-timeout gives this test (its ``timeout`` marker, else the ini's)."""
    marker = request.node.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(request.config.getini("timeout") or 300)


def test_overlapped_rounds_play_beside_training_on_one_round_stale_weights(
    prefect_api, scripted_server, scripted_overrides, tiny_policy, tmp_path, monkeypatch, request
):
    """Round 0's agent training holds on until round 1 has evaluated: only an overlapped
    campaign gets round 1 that far while round 0 trains. The order is the check, not a time.

    The wait keeps one wall-clock bound, and cannot drop it: in a campaign that does not overlap,
    round 1 starts only after this training returns, so the wait is a deadlock that something
    must end. It ends 30 s before pytest-timeout would stop the test (its own limit, which any
    test has), so it fails no run that the per-test limit would not fail anyway, however busy
    the cores; it only turns the deadlock into a clean failure (the training goes on, the
    campaign ends, ``overlapped`` stays empty)."""
    deadline = time.monotonic() + _pytest_timeout_s(request) - 30
    cfg = _config(
        scripted_overrides,
        tmp_path / "store",
        tiny_policy,
        **{"run.rounds": 3, "run.overlap": 1, "run.regen_interval": 3},
    )
    cs = campaign_store(cfg, "ov")
    real_train = train_stages.train
    overlapped: list[int] = []

    def train(ctx, data, parent):
        # round 0's agent update holds on until round 1 has played: only an overlapped
        # campaign gets round 1 that far while round 0 trains (a sequential one would wait
        # here for nothing until the deadline, and the flag stays down)
        if ctx.round == 0 and data.role == "agent":
            while "evaluate" not in cs.completed_stages(1) and time.monotonic() < deadline:
                time.sleep(0.1)
            if "evaluate" in cs.completed_stages(1):
                overlapped.append(1)
        return real_train(ctx, data, parent)

    monkeypatch.setattr(train_stages, "train", train)
    status = asyncio.run(campaign_flow(config=cfg, campaign_id="ov"))
    assert overlapped == [1]
    assert [r["complete"] for r in status["rounds"]] == [True, True, True]
    published = [published_weights(cs, r) for r in range(3)]
    assert published[0].version == "r0000-designer"  # (later rounds may train no role)
    # round r serves round r-2's weights (the base before that), one round stale from round 1
    for r, served, stale in ((0, "base", "0"), (1, "base", "1"), (2, "r0000-designer", "1")):
        for stage in STAGES:
            manifest = cs.read_stage_manifest(r, stage)
            assert manifest is not None
            assert (manifest.inputs["served"], manifest.inputs["staleness"]) == (served, stale)
    # and trains from round r-1's: the checkpoint chain has no gap
    for r in (1, 2):
        agent = cs.read_stage_manifest(r, "train_agent")
        assert agent.inputs["parent"] == published[r - 1].version
    # round 2 (replaying round 0's environments: run.regen_interval) played them again
    prefix = cs.layout.stage_prefix(2, "evaluate")
    assert [k for k in cs.store.list(prefix) if k.endswith("trajectories.jsonl")]


def test_a_lone_overlapped_round_needs_its_parent_published(
    prefect_api, scripted_server, scripted_overrides, tiny_policy, tmp_path
):
    cfg = _config(
        scripted_overrides,
        tmp_path / "store",
        tiny_policy,
        **{"run.rounds": 1, "run.overlap": 1},
    )
    asyncio.run(round_flow(config=cfg, campaign_id="lone", round_index=0))
    cs = campaign_store(cfg, "lone")
    cs.store.delete(cs.layout.stage_key(0, "publish", "manifest.json"))  # round 0 unpublished
    with pytest.raises(StorageError, match="round 0's weights"):
        asyncio.run(round_flow(config=cfg, campaign_id="lone", round_index=1))
