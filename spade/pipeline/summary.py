"""Reading a campaign back: per-round summaries and where its artifacts are (status, UI)."""

from __future__ import annotations

from collections import Counter
from statistics import fmean
from typing import Any

from spade.config import CampaignConfig
from spade.pipeline.record import campaign_store, read_jsonl
from spade.pipeline.replay import PLAN_FILE
from spade.storage import CampaignStore

SUMMARY_COLUMNS: tuple[str, ...] = (
    "round",
    "replay_of",
    "attempts",
    "accepted",
    "win_rate",
    "hinted_win_rate",
    "regret",
    "designer_reward",
    "train_loss",
    "heldout_win_rate",
    "weights",
)
"""The per-round numbers tables show (``spade status``, the Prefect artifact)."""


def _rows(cs: CampaignStore, round: int, stage: str, name: str) -> list[dict[str, Any]]:
    key = cs.layout.stage_key(round, stage, name)
    return read_jsonl(cs, key) if cs.store.exists(key) else []


def _json(cs: CampaignStore, round: int, stage: str, name: str) -> Any:
    key = cs.layout.stage_key(round, stage, name)
    return cs.store.read_json(key) if cs.store.exists(key) else None


def _mean(values: list[float | None]) -> float | None:
    """Mean of the values present (an environment without hinted plays has no hinted rate)."""
    present = [v for v in values if v is not None]
    return round(fmean(present), 4) if present else None


def summarize_round(cs: CampaignStore, round: int) -> dict[str, Any]:
    """Counts and means of one round from its committed artifacts (missing parts: None)."""
    done = cs.completed_stages(round)
    scored = _rows(cs, round, "score", "scored.jsonl")
    accepted = [s for s in scored if s["accepted"]]
    plan = _json(cs, round, "sample_documents", PLAN_FILE) or {}
    designed = scored if plan.get("replay_of") is None else []  # a replay round designed none
    outcome = _json(cs, round, "train_agent", "outcome.json") or {}
    weights = _json(cs, round, "publish", "weights.json") or {}
    heldout = _json(cs, round, "heldout", "summary.json") or {}
    seconds = {}
    for stage in cs.layout.stages:
        if (m := cs.read_stage_manifest(round, stage)) is not None:
            seconds[stage] = m.seconds
    return {
        "round": round,
        "stages_done": len(done),
        "stages_total": len(cs.layout.stages),
        "complete": len(done) == len(cs.layout.stages),
        "replay_of": plan.get("replay_of"),  # a replay round: "accepted" = the replayed envs
        "attempts": len(designed),
        "accepted": len(accepted),
        "rejections": dict(
            Counter(s["failure"] or "rejected" for s in scored if not s["accepted"])
        ),
        "win_rate": _mean([s["win_rate"] for s in accepted]),
        "hinted_win_rate": _mean([s["hinted_win_rate"] for s in accepted]),
        "regret": _mean([s["regret"] for s in accepted]),
        "designer_reward": _mean([s["reward"] for s in designed]),
        "train_loss": (outcome.get("metrics") or {}).get("loss"),
        "heldout_win_rate": heldout.get("win_rate"),
        "heldout_suites": heldout.get("suites") or {},
        "weights": weights.get("version"),
        "stage_seconds": seconds,
    }


def round_summary(cfg: CampaignConfig, campaign_id: str, round: int) -> dict[str, Any]:
    """:func:`summarize_round` for a campaign named by config and id."""
    return summarize_round(campaign_store(cfg, campaign_id), round)


def campaign_status(cs: CampaignStore) -> dict[str, Any]:
    """Every round's summary and the last committed stage."""
    last = cs.last_completed()
    return {
        "campaign": cs.layout.campaign_id,
        "store": cs.store.url(cs.layout.campaign_prefix),
        "rounds": [summarize_round(cs, r) for r in cs.rounds()],
        "last_completed": {"round": last[0], "stage": last[1]} if last else None,
    }
