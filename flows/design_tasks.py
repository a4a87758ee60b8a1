"""The design half of a round as Prefect tasks: documents, designs, verification in the jail,
repair turns and hints (or a replay round's carried environments), and :func:`design_phase`,
which composes them. Each task is a thin wrapper over :mod:`spade.pipeline.design` (or
:mod:`spade.pipeline.replay`, :mod:`spade.pipeline.pool` for pool mode's skip).
"""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import task, unmapped
from prefect.utilities.annotations import quote

from flows.stages import (
    BACKOFF,
    INFERENCE,
    IO_TIMEOUT_S,
    PERSIST,
    VERIFY_TIMEOUT_S,
    cached,
)
from spade.config import CampaignConfig
from spade.designer.corpus import Document
from spade.designer.designer import DesignAttempt, awaiting_verdict, needs_repair
from spade.inference.pool import WeightsRef, shared_backend
from spade.pipeline import design as design_stages
from spade.pipeline import pool as pool_stage
from spade.pipeline import replay as replay_stage
from spade.pipeline.replay import RoundPlan, plan_round
from spade.verify import Verdict

DESIGN_HALF = ("sample_documents", "design", "verify", "hint")
"""The stages a replay round's (or pool mode's) design half commits in one task."""


@task(
    name="sample_documents",
    retries=2,
    retry_delay_seconds=BACKOFF,
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=cached("sample_documents", commits=("sample_documents",)),
    **PERSIST,
)
async def sample_documents(
    config: CampaignConfig, campaign_id: str, round_index: int, plan: RoundPlan
) -> list[Document]:
    """One grounding document per possible design attempt."""
    return await asyncio.to_thread(
        design_stages.sample_documents, config, campaign_id, round_index, plan
    )


@task(
    name="replay",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=cached("hint", commits=DESIGN_HALF),
    **PERSIST,
)
async def replay(
    config: CampaignConfig, campaign_id: str, round_index: int, plan: RoundPlan
) -> list[DesignAttempt]:
    """A replay round's design half: the environments of the last regeneration, carried."""
    return await asyncio.to_thread(replay_stage.replay, config, campaign_id, round_index, plan)


@task(
    name="design",
    task_run_name="design-r{round_index}-a{attempt}",
    cache_policy=cached("design", commits=("design",)),
    **INFERENCE,
)
async def design(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int,
    attempt: int,
    open_slots: list[int],
    documents: list[Document],
    memory: dict[str, Any],
    weights: WeightsRef,
    regeneration: int,
) -> list[DesignAttempt]:
    """The designer writes one attempt for every open slot."""
    async with shared_backend(config, weights) as backend:
        return await design_stages.design(
            config,
            campaign_id,
            round_index,
            attempt,
            open_slots,
            documents,
            memory,
            backend,
            regeneration,
        )


@task(
    name="verify",
    retries=1,
    timeout_seconds=VERIFY_TIMEOUT_S,
    cache_policy=cached("verify"),
    **PERSIST,
)
async def verify(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int,
    code: str,
    references: list[dict[str, str]],
) -> Verdict:
    """The verifier's checks on one design, inside nsjail (a broken design is a verdict),
    compared with the designs it must not copy."""
    return await asyncio.to_thread(
        design_stages.verify, config, campaign_id, round_index, code, references
    )


@task(
    name="settle",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=cached("verify", commits=("verify",)),
    **PERSIST,
)
async def settle(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int,
    earlier: list[DesignAttempt],
    batch: list[DesignAttempt],
    verdicts: list[Verdict],
) -> tuple[list[DesignAttempt], list[int]]:
    """Join an attempt's designs with their verdicts: the settled batch, its slots still open."""
    return await asyncio.to_thread(
        design_stages.settle, config, campaign_id, round_index, earlier, batch, verdicts
    )


@task(
    name="repair",
    task_run_name="repair-r{round_index}-a{attempt}-t{turn}",
    cache_policy=cached("design", commits=("design",)),
    **INFERENCE,
)
async def repair(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int,
    attempt: int,
    turn: int,
    batch: list[DesignAttempt],
    weights: WeightsRef,
) -> list[DesignAttempt]:
    """The designer's repair turn for the attempt's designs rejected with code."""
    async with shared_backend(config, weights) as backend:
        return await design_stages.repair(
            config, campaign_id, round_index, attempt, turn, batch, backend
        )


@task(
    name="hint",
    task_run_name="hint-r{round_index}",
    cache_policy=cached("hint", commits=("hint",)),
    **INFERENCE,
)
async def hint(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int,
    attempts: list[DesignAttempt],
    weights: WeightsRef,
) -> list[DesignAttempt]:
    """A strategy hint for every accepted design."""
    async with shared_backend(config, weights) as backend:
        return await design_stages.hint(config, campaign_id, round_index, attempts, backend)


@task(
    name="skip_design",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=cached("sample_documents", commits=DESIGN_HALF),
    **PERSIST,
)
async def skip_design(
    config: CampaignConfig, campaign_id: str, round_index: int, plan: RoundPlan
) -> list[DesignAttempt]:
    """Pool mode: record the plan, commit the design-side stages as skipped; no attempt."""
    return await asyncio.to_thread(pool_stage.skip_design, config, campaign_id, round_index, plan)


async def design_phase(
    t: Any, config: CampaignConfig, cid: str, r: int, memory: dict[str, Any], weights: WeightsRef
) -> list[DesignAttempt]:
    plan = plan_round(config, cid, r)
    if not plan.designs:
        return list(await t.replay(config, cid, r, plan))
    documents = await t.sample_documents(config, cid, r, plan)
    attempts: list[DesignAttempt] = []
    open_slots = list(range(config.designer.envs_per_round))
    for k in range(config.designer.attempts_per_slot):
        if not open_slots:
            break
        batch = await t.design(
            config, cid, r, k, open_slots, documents, memory, weights, plan.regeneration
        )
        batch, open_slots = await _verified(t, config, cid, r, attempts, batch)
        for turn in range(config.designer.repair_turns):
            if not any(needs_repair(a) for a in batch):
                break
            batch = await t.repair(config, cid, r, k, turn, quote(batch), weights)
            batch, open_slots = await _verified(t, config, cid, r, attempts, batch)
        attempts += batch
    return list(await t.hint(config, cid, r, quote(attempts), weights))


async def _verified(
    t: Any,
    config: CampaignConfig,
    cid: str,
    r: int,
    earlier: list[DesignAttempt],
    batch: list[DesignAttempt],
) -> tuple[list[DesignAttempt], list[int]]:
    """Verify the batch's designs awaiting a verdict (mapped), then settle the batch."""
    todo = awaiting_verdict(batch)
    codes, refs = [a.code for a in todo], [a.references for a in todo]
    verdicts = t.verify.map(unmapped(config), cid, r, codes, refs).result() if todo else []
    settled = await t.settle(config, cid, r, quote(earlier), quote(batch), quote(verdicts))
    return list(settled[0]), list(settled[1])
