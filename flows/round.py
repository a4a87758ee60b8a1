"""One SPADE round as a Prefect flow: every stage of docs/architecture.md §2 is its own task.

sample_documents -> (design -> verify, mapped -> settle -> (repair -> verify, mapped -> settle)
per repair turn) per attempt -> hint -> evaluate, mapped
-> score -> memory -> train_agent -> train_designer -> publish -> heldout. A replay round
(``run.regen_interval``, :mod:`spade.pipeline.replay`) carries the last regeneration's
environments instead of designing, then evaluates, scores and trains as any round.

The ``pool`` stage (:mod:`spade.pipeline.pool`; verify_pool, mapped -> fill_pool) sits between
hint and evaluate and adds environments from a fixed pool: all of them in pool mode
(``run.env_source: pool``, the fixed-environment baseline: the design-side stages and
``train_designer`` are committed as skipped), or enough to reach ``run.min_envs`` when too few
designs were accepted, so every round plays, trains and publishes.

The design half's tasks are in :mod:`flows.design_tasks`, the pool stage's in
:mod:`flows.pool_tasks`, this module holds the rest and the flow. Each task is a thin wrapper
over a ``spade.pipeline`` function, which writes the stage's artifacts and manifest to the
object store; their cache keys, persistence and retries are :mod:`flows.stages`'. Inference and
I/O stages retry with backoff; sandbox stages have timeouts; training never retries blindly (a
failed update is looked at, then re-run).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from prefect import flow, task, unmapped
from prefect.concurrency.asyncio import concurrency
from prefect.utilities.annotations import quote

from flows import design_tasks, pool_tasks
from flows.design_tasks import design_phase
from flows.pool_tasks import pool_phase
from flows.stages import (
    BACKOFF,
    INFERENCE,
    INFERENCE_RETRIES,
    INFERENCE_TIMEOUT_S,
    IO_TIMEOUT_S,
    PERSIST,
    TRAIN_TIMEOUT_S,
    StageKey,
    cached,
    store_retries,
)
from flows.storage import result_storage, task_runner
from spade.agent.evaluate import EnvEvaluation, EnvSpec
from spade.config import CampaignConfig
from spade.designer.designer import DesignAttempt
from spade.inference.pool import WeightsRef, shared_backend
from spade.metrics.prom import start_metrics_server
from spade.pipeline import design as design_stages
from spade.pipeline import evaluate as evaluate_stages
from spade.pipeline import heldout as heldout_stage
from spade.pipeline import score as score_stages
from spade.pipeline import train as train_stages
from spade.pipeline.campaign import campaign_lease, ensure_campaign
from spade.pipeline.replay import plan_round
from spade.pipeline.score import RoundScores
from spade.pipeline.state import carried_state, delayed_designer_batch
from spade.pipeline.summary import round_summary
from spade.pipeline.train import Role


@task(
    name="evaluate",
    task_run_name="evaluate-r{round_index}-{env.env_id}",
    cache_policy=cached("evaluate", commits=("evaluate",), under="envs/{env.env_id}/"),
    **INFERENCE,
)
async def evaluate(
    config: CampaignConfig, campaign_id: str, round_index: int, env: EnvSpec, weights: WeightsRef
) -> EnvEvaluation:
    """Hinted and unhinted plays of one environment."""
    async with shared_backend(config, weights) as backend:
        return await evaluate_stages.evaluate_env(
            config, campaign_id, round_index, env, backend, weights
        )


@task(
    name="commit_evaluate",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=cached("evaluate", commits=("evaluate",)),
    **PERSIST,
)
async def commit_evaluate(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int,
    evaluations: list[EnvEvaluation],
    weights: WeightsRef,
) -> None:
    await asyncio.to_thread(
        evaluate_stages.commit_evaluations,
        config,
        campaign_id,
        round_index,
        evaluations,
        weights.version,
    )


@task(
    name="score",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=cached("score", commits=("score",)),
    **PERSIST,
)
async def score(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int,
    attempts: list[DesignAttempt],
    evaluations: list[EnvEvaluation],
    ema: dict[str, float],
) -> RoundScores:
    """Designer rewards and the updated EMA."""
    return await asyncio.to_thread(
        score_stages.score_round, config, campaign_id, round_index, attempts, evaluations, ema
    )


@task(
    name="memory",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=cached("memory", commits=("memory",)),
    **PERSIST,
)
async def remember(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int,
    memory: dict[str, Any],
    attempts: list[DesignAttempt],
    evaluations: list[EnvEvaluation],
) -> dict[str, Any]:
    """The environment memory after this round."""
    return await asyncio.to_thread(
        score_stages.remember, config, campaign_id, round_index, memory, attempts, evaluations
    )


@task(
    name="train",
    task_run_name="train_{role}-r{round_index}",
    timeout_seconds=TRAIN_TIMEOUT_S,
    cache_policy=cached("train_agent", commits=("train_{role}",)),
    **PERSIST,
)
async def train(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int,
    role: str,
    data: Any,
    parent: WeightsRef,
) -> train_stages.TrainOutcome:
    """One GRPO update (retried on a store failure only: a failed update is looked at, then
    re-run)."""
    limit = config.run.gpu_concurrency_limit
    if limit is None:
        return train_stages.train(config, campaign_id, round_index, role, data, parent)  # type: ignore[arg-type]
    async with concurrency(limit, occupy=1, strict=True):
        return train_stages.train(config, campaign_id, round_index, role, data, parent)  # type: ignore[arg-type]


@task(
    name="skip_training",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=cached("train_agent", commits=("train_agent", "train_designer")),
    **PERSIST,
)
async def skip_training(config: CampaignConfig, campaign_id: str, round_index: int) -> None:
    """Commit both training stages as skipped (``run.train`` is off)."""
    await asyncio.to_thread(train_stages.skip_training, config, campaign_id, round_index)


@task(
    name="skip_role",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=cached("train_designer", commits=("train_{role}",)),
    **PERSIST,
)
async def skip_role(
    config: CampaignConfig, campaign_id: str, round_index: int, role: Role, reason: str
) -> None:
    """Commit one training stage as skipped, with the reason."""
    await asyncio.to_thread(train_stages.skip_role, config, campaign_id, round_index, role, reason)


@task(
    name="publish",
    retries=INFERENCE_RETRIES,
    retry_delay_seconds=BACKOFF,
    timeout_seconds=INFERENCE_TIMEOUT_S,
    cache_policy=cached("publish", commits=("publish",)),
    **PERSIST,
)
async def publish(
    config: CampaignConfig, campaign_id: str, round_index: int, weights: WeightsRef
) -> WeightsRef:
    """Make the trained weights what the next round serves."""
    return await train_stages.publish(config, campaign_id, round_index, weights)


@task(name="heldout", cache_policy=cached("heldout", commits=("heldout",)), **INFERENCE)
async def heldout(
    config: CampaignConfig, campaign_id: str, round_index: int, weights: WeightsRef
) -> dict[str, Any]:
    """Unhinted plays of the held-out environments (skipped when none are configured)."""
    return await heldout_stage.heldout(config, campaign_id, round_index, weights)


@dataclass
class RoundOutcome:
    """What a round flow returns (everything else is in the object store)."""

    campaign_id: str
    round_index: int
    weights: WeightsRef
    summary: dict[str, Any] = field(default_factory=dict)


async def _train_phase(
    t: Any,
    config: CampaignConfig,
    cid: str,
    r: int,
    evaluations: list[EnvEvaluation],
    weights: WeightsRef,
) -> WeightsRef:
    agent = await t.train(config, cid, r, "agent", quote(evaluations), weights)
    if config.run.env_source == "pool":
        reason = "run.env_source is pool: nothing is designed, the designer is not trained"
        await t.skip_role(config, cid, r, "designer", reason)
        return WeightsRef(**agent.weights.to_dict())
    delayed = delayed_designer_batch(config, cid, r)
    data = (delayed[1], delayed[2]) if delayed else ([], [])
    designer = await t.train(config, cid, r, "designer", quote(data), agent.weights)
    return WeightsRef(**designer.weights.to_dict())


@flow(name="spade-round", flow_run_name="{campaign_id}-round-{round_index}", persist_result=False)
async def round_flow(
    config: CampaignConfig, campaign_id: str, round_index: int = 0
) -> RoundOutcome:
    """One self-play round of a campaign; its state comes from the previous round's outputs.
    Holds the campaign's lease (shared with the campaign flow that runs it, if any)."""
    start_metrics_server(config.metrics.prometheus_port)  # None: off; once per process
    with campaign_lease(config, campaign_id):
        return await _round(config, campaign_id, round_index)


async def _round(config: CampaignConfig, cid: str, r: int) -> RoundOutcome:
    t = _bound(await result_storage(config), config)
    ensure_campaign(config, cid)
    carried = carried_state(config, cid, r)
    plan = plan_round(config, cid, r)
    if config.run.env_source == "pool" and plan.designs:
        attempts = list(await t.skip_design(config, cid, r, plan))
    else:
        attempts = await design_phase(t, config, cid, r, carried.memory, carried.weights)
    designed = design_stages.accepted_specs(attempts)
    specs = designed + await pool_phase(t, config, cid, r, plan, designed, carried.weights)
    evaluations = (
        t.evaluate.map(unmapped(config), cid, r, specs, unmapped(carried.weights)).result()
        if specs
        else []
    )
    await t.commit_evaluate(config, cid, r, quote(evaluations), carried.weights)
    await t.score(config, cid, r, quote(attempts), quote(evaluations), carried.ema)
    await t.remember(config, cid, r, carried.memory, quote(attempts), quote(evaluations))
    weights = carried.weights
    if config.run.train:
        weights = await _train_phase(t, config, cid, r, evaluations, weights)
    else:
        await t.skip_training(config, cid, r)
    published = await t.publish(config, cid, r, weights)
    await t.heldout(config, cid, r, published)
    return RoundOutcome(cid, r, published, round_summary(config, cid, r))


def _bound(storage: Any, config: CampaignConfig) -> Any:
    """Every task of the round, persisting its results to ``storage``; the tasks that write to
    the store without retries of their own retry a store failure (``storage.write_retries``)."""
    tasks: dict[str, Any] = {
        name: getattr(module, name)
        for module, names in (
            (design_tasks, DESIGN_TASKS),
            (pool_tasks, POOL_TASKS),
            (sys.modules[__name__], ROUND_TASKS),
        )
        for name in names
    }
    retry = store_retries(config)
    return SimpleNamespace(
        **{
            n: t.with_options(result_storage=storage, **(retry if n in STORE_RETRIED else {}))
            for n, t in tasks.items()
        }
    )


DESIGN_TASKS = (
    "sample_documents", "replay", "design", "verify", "settle", "repair", "hint", "skip_design",
)  # fmt: skip
POOL_TASKS = ("verify_pool", "fill_pool", "replay_pool", "skip_pool")
ROUND_TASKS = (
    "evaluate", "commit_evaluate", "score", "remember", "train", "skip_training", "skip_role",
    "publish", "heldout",
)  # fmt: skip
STORE_RETRIED = frozenset({
    "replay", "settle", "skip_design", "replay_pool", "skip_pool", "commit_evaluate", "score",
    "remember", "train", "skip_training", "skip_role",
})  # fmt: skip
"""Tasks that write and have no retries of their own; the others (inference, publish, heldout,
sample_documents) retry every failure, a store failure included, with backoff. Training retries
only a store failure: a failed update is looked at, then re-run."""


__all__ = ["RoundOutcome", "StageKey", "round_flow", "task_runner"]
