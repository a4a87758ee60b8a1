"""The design half of a round as Prefect tasks: documents, designs, verification in the jail,
repair turns and hints (or a replay round's carried environments), and :func:`design_phase`,
which composes them. Each task is a thin wrapper over the stage of the same name in
:mod:`spade.pipeline` (``documents``, ``design``, ``verify``, ``hint``; ``replay``, and
``pool`` for pool mode's skip).
"""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import task, unmapped

from flows.stages import (
    BACKOFF,
    INFERENCE,
    IO,
    PERSIST,
    VERIFY_TIMEOUT_S,
    bind,
    cached,
    results,
    unwalked,
)
from flows.storage import task_worker
from spade.designer.corpus import Document
from spade.designer.designer import awaiting_verdict, needs_repair
from spade.inference.pool import shared_backend
from spade.pipeline import design as design_stage
from spade.pipeline import documents as documents_stage
from spade.pipeline import hint as hint_stage
from spade.pipeline import pool as pool_stage
from spade.pipeline import replay as replay_stage
from spade.pipeline import verify as verify_stage
from spade.pipeline.context import RoundContext
from spade.pipeline.replay import RoundPlan
from spade.records import DesignAttempt, Verdict

DESIGN_HALF = ("sample_documents", "design", "verify", "hint")
"""The stages a replay round's (or pool mode's) design half commits in one task."""


@task(
    name="sample_documents",
    retries=2,
    retry_delay_seconds=BACKOFF,
    cache_policy=cached("sample_documents", commits=("sample_documents",)),
    **IO,
)
async def sample_documents(ctx: RoundContext, plan: RoundPlan) -> list[Document]:
    """One grounding document per possible design attempt."""
    return await asyncio.to_thread(documents_stage.sample_documents, ctx, plan)


@task(
    name="replay",
    cache_policy=cached("hint", commits=DESIGN_HALF),
    **IO,
)
async def replay(ctx: RoundContext, plan: RoundPlan) -> list[DesignAttempt]:
    """A replay round's design half: the environments of the last regeneration, carried."""
    return await asyncio.to_thread(replay_stage.replay, ctx, plan)


@task(
    name="design",
    task_run_name="design-r{ctx.round}-a{attempt}",
    cache_policy=cached("design", commits=("design",)),
    **INFERENCE,
)
async def design(
    ctx: RoundContext,
    attempt: int,
    open_slots: list[int],
    documents: list[Document],
    memory: dict[str, Any],
    regeneration: int,
) -> list[DesignAttempt]:
    """The designer writes one attempt for every open slot."""
    async with shared_backend(ctx.config, ctx.weights) as backend:
        return await design_stage.design(
            ctx, attempt, open_slots, documents, memory, backend, regeneration
        )


@task(
    name="verify",
    retries=1,
    timeout_seconds=VERIFY_TIMEOUT_S,
    cache_policy=cached("verify"),
    **PERSIST,
)
async def verify(ctx: RoundContext, code: str, references: list[dict[str, str]]) -> Verdict:
    """The verifier's checks on one design, inside nsjail (a broken design is a verdict),
    compared with the designs it must not copy."""
    runner = task_worker()  # here, not in the thread: the Dask worker is a context variable
    return await asyncio.to_thread(verify_stage.verify, ctx, code, references, runner)


@task(
    name="settle",
    cache_policy=cached("verify", commits=("verify",)),
    **IO,
)
async def settle(
    ctx: RoundContext,
    earlier: list[DesignAttempt],
    batch: list[DesignAttempt],
    verdicts: list[Verdict],
) -> tuple[list[DesignAttempt], list[int]]:
    """Join an attempt's designs with their verdicts: the settled batch, its slots still open."""
    return await asyncio.to_thread(verify_stage.settle, ctx, earlier, batch, verdicts)


@task(
    name="repair",
    task_run_name="repair-r{ctx.round}-a{attempt}-t{turn}",
    cache_policy=cached("design", commits=("design",)),
    **INFERENCE,
)
async def repair(
    ctx: RoundContext, attempt: int, turn: int, batch: list[DesignAttempt]
) -> list[DesignAttempt]:
    """The designer's repair turn for the attempt's designs rejected with code."""
    async with shared_backend(ctx.config, ctx.weights) as backend:
        return await design_stage.repair(ctx, attempt, turn, batch, backend)


@task(
    name="hint",
    task_run_name="hint-r{ctx.round}",
    cache_policy=cached("hint", commits=("hint",)),
    **INFERENCE,
)
async def hint(ctx: RoundContext, attempts: list[DesignAttempt]) -> list[DesignAttempt]:
    """A strategy hint for every accepted design."""
    async with shared_backend(ctx.config, ctx.weights) as backend:
        return await hint_stage.hint(ctx, attempts, backend)


@task(
    name="skip_design",
    cache_policy=cached("sample_documents", commits=DESIGN_HALF),
    **IO,
)
async def skip_design(ctx: RoundContext, plan: RoundPlan) -> list[DesignAttempt]:
    """Pool mode: record the plan, commit the design-side stages as skipped; no attempt."""
    return await asyncio.to_thread(pool_stage.skip_design, ctx, plan)


class DesignTasks:
    """The design half's tasks, persisting to the campaign's result ``storage``; ``retry``
    (:func:`flows.stages.store_retries`) for those that write and have no retries of their own;
    the inference tasks and sample_documents retry every failure, waiting ``backoff``
    (:func:`flows.stages.stage_backoff`)."""

    def __init__(self, storage: Any, retry: dict[str, Any], backoff: dict[str, Any]) -> None:
        self.sample_documents = bind(sample_documents, storage, backoff)
        self.replay = bind(replay, storage, retry)
        self.design = bind(design, storage, backoff)
        self.verify = bind(verify, storage)
        self.settle = bind(settle, storage, retry)
        self.repair = bind(repair, storage, backoff)
        self.hint = bind(hint, storage, backoff)
        self.skip_design = bind(skip_design, storage, retry)


async def design_phase(
    t: DesignTasks, ctx: RoundContext, plan: RoundPlan, memory: dict[str, Any]
) -> list[DesignAttempt]:
    """The round's design half: replayed, or designed attempt by attempt (each verified, its
    rejected designs repaired and verified again), then hinted."""
    if not plan.designs:
        return list(await t.replay(ctx, plan))
    documents = await t.sample_documents(ctx, plan)
    attempts: list[DesignAttempt] = []
    open_slots = list(range(ctx.config.designer.envs_per_round))
    for k in range(ctx.config.designer.attempts_per_slot):
        if not open_slots:
            break
        batch = await t.design(ctx, k, open_slots, documents, memory, plan.regeneration)
        batch, open_slots = await _verified(t, ctx, attempts, batch)
        for turn in range(ctx.config.designer.repair_turns):
            if not any(needs_repair(a) for a in batch):
                break
            batch = await t.repair(ctx, k, turn, unwalked(batch))
            batch, open_slots = await _verified(t, ctx, attempts, batch)
        attempts += batch
    return list(await t.hint(ctx, unwalked(attempts)))


async def _verified(
    t: DesignTasks, ctx: RoundContext, earlier: list[DesignAttempt], batch: list[DesignAttempt]
) -> tuple[list[DesignAttempt], list[int]]:
    """Verify the batch's designs awaiting a verdict (mapped), then settle the batch."""
    todo = awaiting_verdict(batch)
    codes, refs = [a.code for a in todo], [a.references for a in todo]
    verdicts = await results(t.verify.map(unmapped(ctx), codes, refs)) if todo else []
    settled = await t.settle(ctx, unwalked(earlier), unwalked(batch), unwalked(verdicts))
    return list(settled[0]), list(settled[1])
