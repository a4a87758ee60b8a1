"""Checkpoint retention in campaigns (``checkpoints.keep_last``): rounds of the scripted
stand-in with a tiny random-weight policy on a temporary local Prefect API. Each publish keeps
the newest checkpoints and those a round still reads and deletes the rest; an interrupted round
whose cached results are gone runs all its stages again on what was kept, and the campaign goes
on; ``spade status`` and the dashboard read the pruned rounds as before; the held-out flow
asked for pruned weights says so."""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import pytest

from flows.campaign import campaign_flow
from flows.heldout import heldout_flow
from spade.config import load_config
from spade.dashboard.data import CampaignData
from spade.errors import CheckpointError
from spade.pipeline.record import campaign_store
from spade.pipeline.retention import RETENTION
from spade.pipeline.state import published_weights
from spade.storage import CampaignStore, StageManifest
from spade.testing.scripted_designer import tiny_policy_overrides

pytestmark = pytest.mark.sandbox


def _config(overrides: dict[str, Any], root, tiny_policy, **more: Any):
    return load_config(
        overrides={
            **overrides,
            "name": "retention",
            "storage.root": str(root),
            **tiny_policy_overrides(tiny_policy),
            **more,
        }
    )


def _checkpoints(cs: CampaignStore, rounds: int) -> dict[str, bool]:
    """Every committed checkpoint of the rounds (its weights' version), and whether its
    folder still holds anything."""
    found = {}
    for r in range(rounds):
        for stage in ("train_agent", "train_designer"):
            manifest = cs.read_stage_manifest(r, stage)
            if manifest is not None and "checkpoint" in manifest.outputs:
                folder = cs.layout.stage_key(r, stage, "checkpoint")
                found[f"r{r:04d}-{stage.removeprefix('train_')}"] = bool(cs.store.list(folder))
    return found


def _manifest(cs: CampaignStore, round: int, stage: str) -> StageManifest:
    manifest = cs.read_stage_manifest(round, stage)
    assert manifest is not None
    return manifest


def _published(cs: CampaignStore, round: int) -> str:
    weights = published_weights(cs, round)
    assert weights is not None
    return weights.version


def test_a_campaign_keeps_the_newest_and_needed_checkpoints_and_resumes_after_pruning(
    prefect_api, scripted_server, scripted_overrides, tiny_policy, tmp_path
):
    root = tmp_path / "store"
    cfg = _config(scripted_overrides, root, tiny_policy, **{"checkpoints.keep_last": 1})
    cs = campaign_store(cfg, "k1")
    asyncio.run(campaign_flow(config=cfg, campaign_id="k1", rounds=3))
    kept = {v for v, present in _checkpoints(cs, 3).items() if present}
    # round 2's published weights, and round 1's (round 2 served and trained from them)
    assert kept == {_published(cs, 2), _published(cs, 1)}
    assert set(_checkpoints(cs, 3)) - kept  # and something older went

    # round 2 was cut off in its held-out stage, and the tasks' cached results are lost (a
    # new results store, or changed code): its resume runs every stage again, serving and
    # training from what the pruning kept
    cs.store.delete(cs.layout.manifest_key(2, "heldout"))
    shutil.rmtree(root / "prefect-results")
    before = {s: _manifest(cs, 2, s).finished for s in ("evaluate", "train_agent")}
    status = asyncio.run(campaign_flow(config=cfg, campaign_id="k1", rounds=4))
    assert [r["complete"] for r in status["rounds"]] == [True] * 4
    for stage, finished in before.items():  # played and trained again
        assert _manifest(cs, 2, stage).finished > finished
    assert _manifest(cs, 2, "train_agent").inputs["parent"] == _published(cs, 1)
    assert _manifest(cs, 2, "evaluate").inputs["served"] == _published(cs, 1)
    kept = {v for v, present in _checkpoints(cs, 4).items() if present}
    assert kept == {_published(cs, 3), _published(cs, 2)}
    record = cs.store.read_json(cs.layout.stage_key(3, "publish", RETENTION))
    assert [k["version"] for k in record["kept"]] == [_published(cs, 3), _published(cs, 2)]

    # what reads old rounds reads them as before
    assert [r["round"] for r in status["rounds"]] == [0, 1, 2, 3]
    overview = CampaignData(str(root), "k1").overview()
    assert [r.weights for r in overview.rounds] == [_published(cs, r) for r in range(4)]
    with pytest.raises(CheckpointError, match=f"{_published(cs, 0)} .* were pruned after round"):
        asyncio.run(heldout_flow(config=cfg, campaign_id="k1", round_index=0))


@pytest.mark.slow  # the needed checkpoints kept: above and tests/pipeline/test_retention.py
def test_an_overlapped_campaign_keeps_what_the_round_beside_it_serves(
    prefect_api, scripted_server, scripted_overrides, tiny_policy, tmp_path
):
    cfg = _config(
        scripted_overrides,
        tmp_path / "store",
        tiny_policy,
        **{"run.rounds": 4, "run.overlap": 1, "checkpoints.keep_last": 1},
    )
    cs = campaign_store(cfg, "ov")
    status = asyncio.run(campaign_flow(config=cfg, campaign_id="ov"))
    assert [r["complete"] for r in status["rounds"]] == [True] * 4
    checkpoints = _checkpoints(cs, 4)
    # round 3 published; round 4 would serve round 2's weights and train from round 3's, and
    # round 3 served round 1's and trained from round 2's
    assert {_published(cs, r) for r in (1, 2, 3)} <= {v for v, ok in checkpoints.items() if ok}
    assert not checkpoints["r0000-agent"]  # never published, older than keep_last
