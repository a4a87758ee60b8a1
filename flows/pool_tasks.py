"""The pool stage of a round as Prefect tasks: environments from a fixed pool, verified in the
jail and hinted (all of them in pool mode, or enough to reach ``run.min_envs``), and
:func:`pool_phase`, which composes them over :mod:`spade.pipeline.pool`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import task, unmapped

from flows.stages import (
    INFERENCE,
    IO,
    PERSIST,
    VERIFY_TIMEOUT_S,
    bind,
    cached,
    results,
    unwalked,
)
from spade.inference.pool import shared_backend
from spade.pipeline import pool as pool_stage
from spade.pipeline.context import RoundContext
from spade.pipeline.pool import PoolEnv
from spade.pipeline.replay import RoundPlan
from spade.records import EnvSpec, Verdict


@task(
    name="verify_pool",
    retries=1,
    timeout_seconds=VERIFY_TIMEOUT_S,
    cache_policy=cached("verify", per_round=False),
    **PERSIST,
)
async def verify_pool(ctx: RoundContext, code: str, waive: tuple[str, ...] = ()) -> Verdict:
    """The verifier's checks on one pool environment, in nsjail (``waive``: the checks its
    import waived); cached by code and waivers (and the sandbox config and verifier source, not
    the round), so a pool file is verified once, not every round."""
    return await asyncio.to_thread(pool_stage.verify_pool_env, ctx, code, waive)


@task(
    name="fill_pool",
    task_run_name="pool-r{ctx.round}",
    cache_policy=cached("pool", commits=("pool",)),
    **INFERENCE,
)
async def fill_pool(
    ctx: RoundContext,
    need: int,
    chosen: list[tuple[PoolEnv, Verdict]],
    rejected: list[tuple[PoolEnv, Verdict]],
) -> list[EnvSpec]:
    """Hints for the verified pool environments (declared, else the model's); commit ``pool``."""
    if not pool_stage.needs_model(chosen):  # every hint declared: no model to load
        return await pool_stage.fill(ctx, need, chosen, rejected, None)
    async with shared_backend(ctx.config, ctx.weights) as backend:
        return await pool_stage.fill(ctx, need, chosen, rejected, backend)


@task(
    name="replay_pool",
    cache_policy=cached("pool", commits=("pool",)),
    **IO,
)
async def replay_pool(ctx: RoundContext, plan: RoundPlan) -> list[EnvSpec]:
    """A replay round's pool stage: the replayed regeneration's pool environments."""
    return await asyncio.to_thread(pool_stage.replay, ctx, plan)


@task(
    name="skip_pool",
    cache_policy=cached("pool", commits=("pool",)),
    **IO,
)
async def skip_pool(ctx: RoundContext, reason: str) -> list[EnvSpec]:
    """Commit the pool stage as skipped (enough designs, or no fill configured)."""
    return await asyncio.to_thread(pool_stage.skip, ctx, reason)


class PoolTasks:
    """The pool stage's tasks, persisting to the campaign's result ``storage``; ``retry`` for
    those that write and have no retries of their own, ``backoff`` for the one that plays."""

    def __init__(self, storage: Any, retry: dict[str, Any], backoff: dict[str, Any]) -> None:
        self.verify_pool = bind(verify_pool, storage)
        self.fill_pool = bind(fill_pool, storage, backoff)
        self.replay_pool = bind(replay_pool, storage, retry)
        self.skip_pool = bind(skip_pool, storage, retry)


async def pool_phase(
    t: PoolTasks, ctx: RoundContext, plan: RoundPlan, designed: list[EnvSpec]
) -> list[EnvSpec]:
    """The round's pool environments: replayed, drawn (verified in the jail, a rejected one
    replaced by the next in the draw) and hinted, or none."""
    if not plan.designs:
        return list(await t.replay_pool(ctx, plan))
    need, candidates, why = pool_stage.candidates(ctx.config, plan, [s.env_id for s in designed])
    if need == 0:
        return list(await t.skip_pool(ctx, why))
    chosen: list[tuple[PoolEnv, Verdict]] = []
    rejected: list[tuple[PoolEnv, Verdict]] = []
    while candidates and len(chosen) < need:
        batch, candidates = candidates[: need - len(chosen)], candidates[need - len(chosen) :]
        waivers = [e.waive for e in batch]
        verdicts = await results(t.verify_pool.map(unmapped(ctx), [e.code for e in batch], waivers))
        ok, bad = pool_stage.take(need - len(chosen), batch, verdicts)
        chosen, rejected = chosen + ok, rejected + bad
    return list(await t.fill_pool(ctx, need, unwalked(chosen), unwalked(rejected)))
