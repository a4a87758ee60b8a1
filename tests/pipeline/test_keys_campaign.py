"""Pieces of the staged round that need neither Prefect nor a jail: cache-key parts, stage
durations, the campaign's lifecycle in the store, summaries."""

from __future__ import annotations

import pytest

from spade.config import load_config
from spade.errors import ConfigError, StorageError
from spade.pipeline.campaign import (
    ensure_campaign,
    first_incomplete_round,
    list_campaigns,
    request_stop,
    round_complete,
    saved_config,
    start_campaign,
    stop_requested,
)
from spade.pipeline.context import RoundContext
from spade.pipeline.keys import STAGE_ENTRIES, STAGE_SECTIONS, config_hash, stage_code_version
from spade.pipeline.record import StageRecord, busy_seconds, campaign_store
from spade.pipeline.state import carried_state, published_weights
from spade.pipeline.summary import campaign_status
from spade.storage import STAGES, ObjectStore


def test_every_stage_has_sections_and_modules():
    assert set(STAGE_SECTIONS) == set(STAGES) == set(STAGE_ENTRIES)
    versions = {s: stage_code_version(s) for s in STAGES}
    assert all(len(v) == 16 for v in versions.values())
    assert versions["design"] != versions["evaluate"]


def test_config_hash_follows_only_the_sections_a_stage_reads():
    base = load_config()
    trained = load_config(overrides={"training.lr": 0.5})
    assert config_hash(base, "design") == config_hash(trained, "design")
    assert config_hash(base, "train_agent") != config_hash(trained, "train_agent")
    fewer = load_config(overrides={"run.heldout_plays": 2})  # what the heldout stage plays
    assert config_hash(base, "heldout") != config_hash(fewer, "heldout")
    assert config_hash(base, "evaluate") == config_hash(fewer, "evaluate")
    moved = load_config(overrides={"storage.root": "/elsewhere", "inference.batch_size": 3})
    assert all(config_hash(base, s) == config_hash(moved, s) for s in STAGES)


def test_busy_seconds_counts_overlaps_once_and_skips_gaps():
    spans = [
        {"started": 0.0, "finished": 2.0},
        {"started": 1.0, "finished": 3.0},
        {"started": 10.0, "finished": 11.0},
        {"nothing": True},
    ]
    assert busy_seconds(spans) == pytest.approx(4.0)
    assert busy_seconds([]) == 0.0


def _commit_round(cfg, cid: str, r: int, stages=STAGES) -> None:
    for stage in stages:
        rec = StageRecord(RoundContext.open(cfg, cid, r), stage)
        if stage == "memory":
            rec.write_json("memory.json", {"version": 1, "capacity": 200, "records": []})
        if stage == "score":
            rec.write_json("ema.json", {"logic": 0.5})
        if stage == "publish":
            rec.write_json("weights.json", {"version": "r0000-agent", "checkpoint": None})
        rec.commit()


def test_campaign_lifecycle_in_the_store(tmp_path):
    cfg = load_config(overrides={"storage.root": str(tmp_path), "name": "life"})
    cs = start_campaign(campaign_store(cfg, "c1"), cfg)
    assert list_campaigns(cs.store) == ["c1"]
    assert saved_config(cs.store, "c1") == cfg
    assert first_incomplete_round(cs) == 0
    with pytest.raises(StorageError, match="not committed"):
        carried_state(RoundContext.open(cfg, "c1", 1))
    _commit_round(cfg, "c1", 0)
    assert round_complete(cs, 0) and first_incomplete_round(cs) == 1
    carried = carried_state(RoundContext.open(cfg, "c1", 1))
    assert carried.ema == {"logic": 0.5} and carried.weights.version == "r0000-agent"
    assert published_weights(campaign_store(cfg, "c1"), 0).version == "r0000-agent"  # type: ignore[union-attr]
    assert published_weights(campaign_store(cfg, "c1"), 1) is None
    _commit_round(cfg, "c1", 1, STAGES[:3])
    status = campaign_status(cs)
    assert [r["complete"] for r in status["rounds"]] == [True, False]
    assert status["last_completed"] == {"round": 1, "stage": STAGES[2]}
    assert cs.store.exists("campaign/c1/round-0001/config.yaml")

    request_stop(cs)
    assert stop_requested(cs)
    start_campaign(campaign_store(cfg, "c1"), cfg)  # a new start clears it
    assert not stop_requested(cs)
    ensure_campaign(campaign_store(cfg, "c2"), cfg)
    assert list_campaigns(cs.store) == ["c1", "c2"]


def test_resuming_an_unknown_campaign_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no campaign 'nope'"):
        saved_config(ObjectStore(str(tmp_path)), "nope")


def test_code_versions_read_sources_without_importing_them():
    # the in-jail server must never run on the host: importing it re-points stdout at stderr
    import subprocess
    import sys

    probe = (
        "import sys; from spade.pipeline.keys import stage_code_version as v;"
        " [v(s) for s in ('verify', 'evaluate')];"
        " print('spade.sandbox.server' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
