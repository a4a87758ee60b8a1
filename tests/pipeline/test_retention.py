"""Checkpoint retention (``checkpoints.keep_last``): after each publish the campaign keeps its
newest checkpoints and those a round still reads (what is published, the next training's
parent, what an unfinished round serves), deletes the rest with their staged serving copies,
and records what went; with ``keep_last`` unset nothing is deleted. Rounds of real training
stages (a tiny random-weight Llama trained on CPU) and publish stages, on a local store and
on S3 (moto) with a managed stand-in vLLM that stages LoRA adapters to local disk."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: never the hub

import pytest

from spade.config import CampaignConfig
from spade.errors import CheckpointError, StorageError
from spade.inference.checkpoints import latest_checkpoint
from spade.inference.pool import close_shared_backends, staged_folder
from spade.pipeline.campaign import ensure_campaign
from spade.pipeline.context import RoundContext
from spade.pipeline.publish import publish
from spade.pipeline.record import campaign_store
from spade.pipeline.retention import PRUNED, RETENTION, check_not_pruned, pruned_record
from spade.pipeline.state import published_weights
from spade.pipeline.train import train
from spade.records import BASE, WeightsRef
from spade.storage import CampaignStore, ObjectStore
from tests.pipeline.test_train_publish import LORA, _ask, _config, _design_data, _vllm


def _rounds(cfg: CampaignConfig, cid: str, rounds: range, parent: WeightsRef = BASE) -> None:
    """Each round trains the designer from the last published weights and publishes them,
    as a round does (one event loop: the managed server is the pool's)."""

    async def go() -> None:
        weights = parent
        try:  # the pool's servers are stopped whatever happens
            for r in rounds:
                ctx = RoundContext.open(cfg, cid, r)
                weights = (await asyncio.to_thread(train, ctx, _design_data(), weights)).weights
                await publish(ctx, weights)
        finally:
            await close_shared_backends()

    ensure_campaign(campaign_store(cfg, cid), cfg)
    asyncio.run(go())


def _present(cs: CampaignStore, rounds: int) -> list[int]:
    """The rounds whose designer checkpoint is complete in the store."""
    return [
        r
        for r in range(rounds)
        if latest_checkpoint(
            cs.store.url(cs.layout.stage_key(r, "train_designer", "checkpoint")),
            cs.store.storage_options,
            verify="size",
        )
        is not None
    ]


def test_the_newest_and_the_needed_checkpoints_stay_older_ones_go_and_training_goes_on(
    tiny_policy: Path, tmp_path: Path
) -> None:
    cfg = _config(tiny_policy, str(tmp_path / "store"), **{"checkpoints.keep_last": 1})
    cs = campaign_store(cfg, "keep1")
    _rounds(cfg, "keep1", range(4))

    # the newest one (round 3's: published) and round 2's, which round 3 trained from (a
    # resume that re-runs round 3's training reads it) stay; older ones are gone
    assert _present(cs, 4) == [2, 3]
    for r in (0, 1):
        assert cs.store.list(cs.layout.stage_key(r, "train_designer", "checkpoint")) == []
        gone = published_weights(cs, r)
        assert gone is not None
        record = pruned_record(cs, gone)
        assert record is not None and record["pruned_after_round"] == r + 2
        with pytest.raises(CheckpointError, match=f"{gone.version} .* were pruned after round"):
            check_not_pruned(cs, gone)
        # what the round committed still reads: its outcome, its manifest's outputs
        assert cs.verify_stage(r, "train_designer") == []
        assert cs.verify_stage(r, "publish") == []
    assert pruned_record(cs, published_weights(cs, 3)) is None  # type: ignore[arg-type]

    # the publish stage that pruned says so, in its committed outputs and its note
    manifest = cs.read_stage_manifest(3, "publish")
    assert manifest is not None
    assert manifest.outputs[RETENTION] == cs.layout.stage_key(3, "publish", RETENTION)
    assert cs.verify_stage(3, "publish") == []
    assert "pruned 1 checkpoint(s) (r0001-designer)" in manifest.note
    record = cs.store.read_json(cs.layout.stage_key(3, "publish", RETENTION))
    assert [p["version"] for p in record["pruned"]] == ["r0001-designer"]
    assert [k["version"] for k in record["kept"]] == ["r0003-designer", "r0002-designer"]

    # the campaign goes on from what was kept: round 4 trains from round 3's weights
    _rounds(cfg, "keep1", range(4, 5), published_weights(cs, 3))  # type: ignore[arg-type]
    assert _present(cs, 5) == [3, 4]


def test_with_keep_last_unset_nothing_is_deleted(tiny_policy: Path, tmp_path: Path) -> None:
    cfg = _config(tiny_policy, str(tmp_path / "store"))
    cs = campaign_store(cfg, "all")
    _rounds(cfg, "all", range(3))
    assert _present(cs, 3) == [0, 1, 2]
    assert not [k for k in cs.store.list("campaign/all") if k.endswith((PRUNED, RETENTION))]
    manifest = cs.read_stage_manifest(2, "publish")
    assert manifest is not None and RETENTION not in manifest.outputs and manifest.note == ""


def test_on_s3_the_staged_copies_go_with_their_checkpoints(
    tiny_policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_bucket: Any
) -> None:
    b = s3_bucket
    more = {"storage.storage_options": b.storage_options, **LORA, **_vllm(tmp_path, monkeypatch)}
    cfg = _config(tiny_policy, f"s3://{b.name}/runs", **{**more, "checkpoints.keep_last": 1})
    cs = campaign_store(cfg, "s3")
    _rounds(cfg, "s3", range(4))

    assert _present(cs, 4) == [2, 3]
    published = [published_weights(cs, r) for r in range(4)]
    staged = sorted(p.name for p in (tmp_path / "cache" / "published").iterdir())
    assert staged == sorted(staged_folder(w).name for w in published[2:] if w is not None)
    record = cs.store.read_json(cs.layout.stage_key(3, "publish", RETENTION))
    assert record["staged_removed"] == [str(staged_folder(published[1]))]  # type: ignore[arg-type]

    async def ask() -> None:
        try:  # the managed server is stopped whatever happens
            completion = await _ask(cfg, published[3])  # type: ignore[arg-type]
            assert completion.model == "r0003-designer"
        finally:
            await close_shared_backends()

    asyncio.run(ask())  # what is published is still served, from a fresh server


def test_an_interrupted_pass_is_finished_by_the_next(
    tiny_policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _config(tiny_policy, str(tmp_path / "store"), **{"checkpoints.keep_last": 1})
    cs = campaign_store(cfg, "cut")
    _rounds(cfg, "cut", range(2))
    real_delete = ObjectStore.delete

    def outage(self: ObjectStore, prefix: str) -> list[str]:
        if prefix.endswith("/checkpoint"):
            raise StorageError(f"cannot delete {prefix}: the store went away")
        return real_delete(self, prefix)

    monkeypatch.setattr(ObjectStore, "delete", outage)
    with pytest.raises(StorageError, match="the store went away"):
        _rounds(cfg, "cut", range(2, 3), published_weights(cs, 1))  # type: ignore[arg-type]
    # round 2 published; the pass marked round 0's checkpoint pruned, then could not delete it
    assert published_weights(cs, 2) is not None
    assert pruned_record(cs, published_weights(cs, 0)) is not None  # type: ignore[arg-type]
    assert _present(cs, 3) == [0, 1, 2]
    monkeypatch.setattr(ObjectStore, "delete", real_delete)

    _rounds(cfg, "cut", range(3, 4), published_weights(cs, 2))  # type: ignore[arg-type]
    assert _present(cs, 4) == [2, 3]
    record = cs.store.read_json(cs.layout.stage_key(3, "publish", RETENTION))
    assert [p["version"] for p in record["pruned"]] == ["r0000-designer", "r0001-designer"]
