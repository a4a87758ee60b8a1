"""The pool stage of a round as Prefect tasks: environments from a fixed pool, verified in the
jail and hinted (all of them in pool mode, or enough to reach ``run.min_envs``), and
:func:`pool_phase`, which composes them over :mod:`spade.pipeline.pool`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import task, unmapped
from prefect.utilities.annotations import quote

from flows.stages import INFERENCE, IO_TIMEOUT_S, PERSIST, VERIFY_TIMEOUT_S, cached
from spade.agent.evaluate import EnvSpec
from spade.config import CampaignConfig
from spade.inference.pool import WeightsRef, shared_backend
from spade.pipeline import pool as pool_stage
from spade.pipeline.pool import PoolEnv
from spade.pipeline.replay import RoundPlan
from spade.verify import Verdict


@task(
    name="verify_pool",
    retries=1,
    timeout_seconds=VERIFY_TIMEOUT_S,
    cache_policy=cached("verify"),
    **PERSIST,
)
async def verify_pool(config: CampaignConfig, code: str) -> Verdict:
    """The verifier's checks on one pool environment, in nsjail; cached by code (and the
    sandbox config and verifier source), so a pool file is verified once, not every round."""
    return await asyncio.to_thread(pool_stage.verify_pool_env, config, code)


@task(
    name="fill_pool",
    task_run_name="pool-r{round_index}",
    cache_policy=cached("pool", commits=("pool",)),
    **INFERENCE,
)
async def fill_pool(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int,
    need: int,
    chosen: list[tuple[PoolEnv, Verdict]],
    rejected: list[tuple[PoolEnv, Verdict]],
    weights: WeightsRef,
) -> list[EnvSpec]:
    """Hints for the verified pool environments (declared, else the model's); commit ``pool``."""
    args = (config, campaign_id, round_index, need, chosen, rejected)
    if not pool_stage.needs_model(chosen):  # every hint declared: no model to load
        return await pool_stage.fill(*args, None)
    async with shared_backend(config, weights) as backend:
        return await pool_stage.fill(*args, backend)


@task(
    name="replay_pool",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=cached("pool", commits=("pool",)),
    **PERSIST,
)
async def replay_pool(
    config: CampaignConfig, campaign_id: str, round_index: int, plan: RoundPlan
) -> list[EnvSpec]:
    """A replay round's pool stage: the replayed regeneration's pool environments."""
    return await asyncio.to_thread(pool_stage.replay, config, campaign_id, round_index, plan)


@task(
    name="skip_pool",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=cached("pool", commits=("pool",)),
    **PERSIST,
)
async def skip_pool(
    config: CampaignConfig, campaign_id: str, round_index: int, reason: str
) -> list[EnvSpec]:
    """Commit the pool stage as skipped (enough designs, or no fill configured)."""
    return await asyncio.to_thread(pool_stage.skip, config, campaign_id, round_index, reason)


async def pool_phase(
    t: Any,
    config: CampaignConfig,
    cid: str,
    r: int,
    plan: RoundPlan,
    designed: list[EnvSpec],
    weights: WeightsRef,
) -> list[EnvSpec]:
    """The round's pool environments: replayed, drawn (verified in the jail, a rejected one
    replaced by the next in the draw) and hinted, or none."""
    if not plan.designs:
        return list(await t.replay_pool(config, cid, r, plan))
    need, candidates, why = pool_stage.candidates(config, plan, [s.env_id for s in designed])
    if need == 0:
        return list(await t.skip_pool(config, cid, r, why))
    chosen: list[tuple[PoolEnv, Verdict]] = []
    rejected: list[tuple[PoolEnv, Verdict]] = []
    while candidates and len(chosen) < need:
        batch, candidates = candidates[: need - len(chosen)], candidates[need - len(chosen) :]
        verdicts = t.verify_pool.map(unmapped(config), [e.code for e in batch]).result()
        ok, bad = pool_stage.take(need - len(chosen), batch, verdicts)
        chosen, rejected = chosen + ok, rejected + bad
    return list(await t.fill_pool(config, cid, r, need, quote(chosen), quote(rejected), weights))
