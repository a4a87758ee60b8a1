"""What one round hands the next through the object store: memory, EMA, weights, and the
designer's delayed batch. Everything here is read from committed stage outputs only."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spade.config import CampaignConfig
from spade.curriculum.memory import EnvironmentMemory
from spade.curriculum.pool import seed_records
from spade.errors import StorageError
from spade.pipeline.record import read_jsonl
from spade.pipeline.replay import read_plan
from spade.records import BASE, DesignAttempt, WeightsRef
from spade.storage import CampaignStore

if TYPE_CHECKING:  # a type only: reading state needs no policy
    from spade.pipeline.context import RoundContext


@dataclass
class Carried:
    """The state a round starts from."""

    memory: dict[str, Any]
    ema: dict[str, float] = field(default_factory=dict)
    weights: WeightsRef = BASE  # what the round serves
    staleness: int = 0  # rounds between the served weights' and the newest the round trains on


def seed_memory(cfg: CampaignConfig) -> EnvironmentMemory:
    """A fresh environment memory holding the seed pool (:func:`seed_records`), or empty."""
    memory = EnvironmentMemory(cfg.memory)
    memory.extend(seed_records(cfg))
    return memory


def initial_memory(cfg: CampaignConfig) -> dict[str, Any]:
    """The memory of round 0: the seed pool, or empty (:func:`seed_memory`)."""
    return seed_memory(cfg).state_dict()


def _output(cs: CampaignStore, round: int, stage: str, name: str) -> Any:
    manifest = cs.read_stage_manifest(round, stage)
    if manifest is None or not manifest.done:
        raise StorageError(
            f"{cs.store.url(cs.layout.stage_prefix(round, stage))}: stage {stage} of round"
            f" {round} is not committed; resume that round first"
        )
    return cs.store.read_json(cs.layout.stage_key(round, stage, name))


def served_round(ctx: RoundContext) -> int:
    """The round whose published weights round ``ctx.round`` serves: the one before it, or
    with ``run.overlap`` the one before that (still training when this round starts); below
    0: the base weights."""
    return ctx.round - 1 - ctx.config.run.overlap


def carried_state(ctx: RoundContext) -> Carried:
    """The round's starting state: round 0 starts fresh, later rounds from round - 1 (memory
    and EMA) and the weights of :func:`served_round`."""
    served = served_round(ctx)
    staleness = ctx.round - 1 - max(served, -1)  # round 0 serves the base: nothing is newer
    if ctx.round == 0:
        return Carried(initial_memory(ctx.config))
    cs, prev = ctx.store, ctx.round - 1
    weights = (
        WeightsRef.from_dict(_output(cs, served, "publish", "weights.json"))
        if served >= 0
        else BASE
    )
    return Carried(
        memory=_output(cs, prev, "memory", "memory.json"),
        ema={k: float(v) for k, v in _output(cs, prev, "score", "ema.json").items()},
        weights=weights,
        staleness=staleness,
    )


def delayed_designer_batch(
    ctx: RoundContext,
) -> tuple[int, list[DesignAttempt], list[float]] | None:
    """The design attempts and rewards the designer trains on in the round: those of round
    ``ctx.round - training.designer_delay_steps`` (None before that round exists, and when that
    round designed nothing: it replayed environments, see :mod:`spade.pipeline.replay`, or
    took them all from the pool, ``run.env_source: pool``). Scored rows of pool environments
    are not the designer's and are left out, and so are attempts that failed on our side (an
    outage: no reward, nothing to learn from)."""
    source = ctx.round - ctx.config.training.designer_delay_steps
    if source < 0:
        return None
    cs = ctx.store
    _output(cs, source, "score", "ema.json")  # the source round must be scored
    verified = cs.read_stage_manifest(source, "verify")
    if not read_plan(cs, source).designs or (verified and verified.status == "skipped"):
        return None
    rows = read_jsonl(cs, cs.layout.stage_key(source, "verify", "attempts.jsonl"))
    attempts = [DesignAttempt.from_dict(r) for r in rows]
    scored = [
        s
        for s in read_jsonl(cs, cs.layout.stage_key(source, "score", "scored.jsonl"))
        if s.get("source", "designed") == "designed"
    ]
    if len(scored) != len(attempts):
        raise StorageError(f"round {source}: {len(attempts)} attempts but {len(scored)} scores")
    kept = [(a, s) for a, s in zip(attempts, scored, strict=True) if not a.failed]
    return source, [a for a, _ in kept], [_trained_reward(s) for _, s in kept]


def _trained_reward(row: dict[str, Any]) -> float:
    """A score row's reward of the answer the designer trains on, before centring (the
    training stage centres once, over the answers it trains on). Rows written before that
    column existed: the design's uncentred reward (their first answers' rewards are lost)."""
    for key in ("trained_raw_reward", "raw_reward", "reward"):
        if row.get(key) is not None:
            return float(row[key])
    raise StorageError(f"score row of {row.get('env_id')!r} has no reward")


def published_weights(cs: CampaignStore, round: int) -> WeightsRef | None:
    """The weights round ``round`` published; None when its publish stage is not committed."""
    manifest = cs.read_stage_manifest(round, "publish")
    if manifest is None or not manifest.done:
        return None
    return WeightsRef.from_dict(
        cs.store.read_json(cs.layout.stage_key(round, "publish", "weights.json"))
    )


PARENT_POLL_S = 0.25
"""How often an overlapped round looks for its parent's published weights."""


async def training_parent(ctx: RoundContext, *, wait: bool = False) -> WeightsRef:
    """The weights round ``ctx.round`` trains from: those of the round before it (the base
    for round 0). Without ``run.overlap`` they are what the round serves. With it, the round
    before may still be training: ``wait`` polls the store until it has published (a campaign
    run, which runs that round beside this one), else it must have published already."""
    if ctx.config.run.overlap == 0 or ctx.round == 0:
        return ctx.weights
    parent = ctx.round - 1
    while (weights := published_weights(ctx.store, parent)) is None:
        if not wait:
            raise StorageError(
                f"round {ctx.round} trains from round {parent}'s weights (run.overlap), which"
                f" are not published; run round {parent} first, or run the campaign"
            )
        await asyncio.sleep(PARENT_POLL_S)
    return weights
