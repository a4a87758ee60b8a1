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
over the ``spade.pipeline`` stage of its name, which writes the stage's artifacts and manifest
to the object store; every task takes the round's :class:`~spade.pipeline.context.RoundContext`
(opened once per round: the store, the sandbox policy, the weights served) and its data
inputs; their cache keys, persistence and retries are :mod:`flows.stages`'. A stage whose
module declares a ``run`` function (``score``, ``memory``: :mod:`spade.pipeline.stage`) needs no
task here: ``t.run(function, ctx, ...)`` runs it as its generic task (docs/architecture.md
§12.1). Inference and I/O
stages retry with backoff; sandbox stages have timeouts; training never retries blindly (a
failed update is looked at, then re-run).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from prefect import flow, get_run_logger, task, unmapped

from flows.design_tasks import DesignTasks, design_phase
from flows.gpu_limit import gpu_slot
from flows.pool_tasks import PoolTasks, pool_phase
from flows.stages import (
    BACKOFF,
    INFERENCE,
    INFERENCE_RETRIES,
    INFERENCE_TIMEOUT_S,
    IO,
    PERSIST,
    TRAIN_TIMEOUT_S,
    StageKey,
    StageTasks,
    bind,
    cached,
    results,
    stage_backoff,
    store_retries,
    unwalked,
)
from flows.storage import (
    configured_task_runner,
    flow_run_label,
    result_storage,
    task_worker,
)
from spade.config import CampaignConfig
from spade.inference.pool import held, serve_on_managed_vllm, shared_backend, shared_vllm_server
from spade.metrics.prom import start_metrics_server
from spade.pipeline import evaluate as evaluate_stage
from spade.pipeline import heldout as heldout_stage
from spade.pipeline import memory as memory_stage
from spade.pipeline import publish as publish_stage
from spade.pipeline import score as score_stage
from spade.pipeline import train as train_stage
from spade.pipeline.campaign import campaign_lease, ensure_campaign
from spade.pipeline.context import RoundContext
from spade.pipeline.hint import accepted_specs
from spade.pipeline.replay import plan_round
from spade.pipeline.state import carried_state, delayed_designer_batch, training_parent
from spade.pipeline.summary import summarize_round
from spade.pipeline.train import AgentData, DesignerData, Role, TrainData, TrainOutcome
from spade.records import EnvEvaluation, EnvSpec, WeightsRef


@task(
    name="evaluate",
    task_run_name="evaluate-r{ctx.round}-{env.env_id}",
    cache_policy=cached("evaluate", commits=("evaluate",), under="envs/{env.env_id}/"),
    **INFERENCE,
)
async def evaluate(ctx: RoundContext, env: EnvSpec) -> EnvEvaluation:
    """Hinted and unhinted plays of one environment."""
    async with shared_backend(ctx.config, ctx.weights) as backend:
        return await evaluate_stage.evaluate_env(ctx, env, backend, task_worker())


@task(
    name="commit_evaluate",
    cache_policy=cached("evaluate", commits=("evaluate",)),
    **IO,
)
async def commit_evaluate(ctx: RoundContext, evaluations: list[EnvEvaluation]) -> None:
    await asyncio.to_thread(evaluate_stage.commit_evaluations, ctx, evaluations)


@task(
    name="train",
    task_run_name="train_{data.role}-r{ctx.round}",
    timeout_seconds=TRAIN_TIMEOUT_S,
    cache_policy=cached("train_agent", commits=("train_{data.role}",)),
    **PERSIST,
)
async def train(ctx: RoundContext, data: TrainData, parent: WeightsRef) -> TrainOutcome:
    """One GRPO update (retried on a store failure only: a failed update is looked at, then
    re-run)."""
    limit = ctx.config.run.gpu_concurrency_limit
    if limit is None:
        return await _in_training_thread(train_stage.train, ctx, data, parent)
    async with gpu_slot(limit, get_run_logger()):  # created with 1 slot if the server lacks it
        return await _in_training_thread(train_stage.train, ctx, data, parent)


_TRAINING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spade-train")
"""The one thread every in-process update of this process runs on: an update takes minutes,
and the event loop meanwhile runs the next round's stages (run.overlap) and the flow's
heartbeats. One thread, not any of asyncio's: each thread that allocates gets its own malloc
arena, which keeps an update's peak after it ends, and a 3-round demo whose updates ran on
different threads grew to 22.6 GB resident and was killed for memory (2 cores, 23 GiB)."""


async def _in_training_thread(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` on :data:`_TRAINING`, with the caller's context (Prefect's run context)."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_TRAINING, context.run, fn, *args)


@task(
    name="skip_training",
    cache_policy=cached("train_agent", commits=("train_agent", "train_designer")),
    **IO,
)
async def skip_training(ctx: RoundContext) -> None:
    """Commit both training stages as skipped (``run.train`` is off)."""
    await asyncio.to_thread(train_stage.skip_training, ctx)


@task(
    name="skip_role",
    cache_policy=cached("train_designer", commits=("train_{role}",)),
    **IO,
)
async def skip_role(ctx: RoundContext, role: Role, reason: str) -> None:
    """Commit one training stage as skipped, with the reason."""
    await asyncio.to_thread(train_stage.skip_role, ctx, role, reason)


@task(
    name="publish",
    retries=INFERENCE_RETRIES,
    retry_delay_seconds=BACKOFF,
    timeout_seconds=INFERENCE_TIMEOUT_S,
    cache_policy=cached("publish", commits=("publish",)),
    **PERSIST,
)
async def publish(ctx: RoundContext, weights: WeightsRef) -> WeightsRef:
    """Make the trained weights what the next round serves."""
    return await publish_stage.publish(ctx, weights)


@task(name="heldout", cache_policy=cached("heldout", commits=("heldout",)), **INFERENCE)
async def heldout(ctx: RoundContext, weights: WeightsRef) -> dict[str, Any]:
    """Unhinted plays of the held-out environments (skipped when none are configured)."""
    return await heldout_stage.heldout(ctx, weights)


class RoundTasks(StageTasks):
    """Every task of the round, persisting its results to the campaign's result ``storage``.
    The tasks that write to the store without retries of their own retry a store failure
    (``storage.write_retries``); the others (inference, publish, heldout, sample_documents)
    retry every failure, a store failure included, with backoff. Training retries only a store
    failure: a failed update is looked at, then re-run."""

    def __init__(self, storage: Any, config: CampaignConfig) -> None:
        retry, backoff = store_retries(config), stage_backoff(config)
        super().__init__(storage, retry)  # the declared stages' generic tasks: self.run
        self.design = DesignTasks(storage, retry, backoff)
        self.pool = PoolTasks(storage, retry, backoff)
        self.evaluate = bind(evaluate, storage, backoff)
        self.commit_evaluate = bind(commit_evaluate, storage, retry)
        self.train = bind(train, storage, retry)
        self.skip_training = bind(skip_training, storage, retry)
        self.skip_role = bind(skip_role, storage, retry)
        self.publish = bind(publish, storage, backoff)
        self.heldout = bind(heldout, storage, backoff)


@dataclass
class RoundOutcome:
    """What a round flow returns (everything else is in the object store)."""

    campaign_id: str
    round_index: int
    weights: WeightsRef
    summary: dict[str, Any] = field(default_factory=dict)


async def _train_phase(
    t: RoundTasks, ctx: RoundContext, evaluations: list[EnvEvaluation], parent: WeightsRef
) -> WeightsRef:
    agent = await t.train(ctx, unwalked(AgentData(evaluations)), parent)
    if ctx.config.run.env_source == "pool":
        reason = "run.env_source is pool: nothing is designed, the designer is not trained"
        await t.skip_role(ctx, "designer", reason)
        return WeightsRef(**agent.weights.to_dict())
    delayed = delayed_designer_batch(ctx)
    data = DesignerData(delayed[1], delayed[2]) if delayed else DesignerData([], [])
    designer = await t.train(ctx, unwalked(data), agent.weights)
    return WeightsRef(**designer.weights.to_dict())


@flow(name="spade-round", flow_run_name="{campaign_id}-round-{round_index}", persist_result=False)
async def round_flow(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int = 0,
    wait_for_parent: bool = False,
) -> RoundOutcome:
    """One self-play round of a campaign; its state comes from the previous round's outputs.
    Holds the campaign's lease (shared with the campaign flow that runs it, if any); its
    mapped stages run on ``config.run.task_runner`` (threads or a Dask cluster).

    With ``run.overlap`` the round serves the weights of round ``round_index - 2`` and trains
    from those of ``round_index - 1``; ``wait_for_parent`` (what a campaign run passes: that
    round is training beside this one) waits for them to be published before training, else
    they must be published already."""
    start_metrics_server(config.metrics.prometheus_port)  # None: off; once per process
    ctx = RoundContext.open(config, campaign_id, round_index)
    lease = campaign_lease(ctx.store, config, holder=flow_run_label())
    with lease, configured_task_runner(config):
        return await _round(ctx, wait_for_parent)


async def _round(ctx: RoundContext, wait_for_parent: bool = False) -> RoundOutcome:
    t = RoundTasks(await result_storage(ctx.config), ctx.config)
    ensure_campaign(ctx.store, ctx.config)
    carried = carried_state(ctx)
    ctx = ctx.serving(carried.weights, carried.staleness)
    plan = plan_round(ctx)
    if ctx.config.run.env_source == "pool" and plan.designs:
        attempts = list(await t.design.skip_design(ctx, plan))
    else:
        attempts = await design_phase(t.design, ctx, plan, carried.memory)
    designed = accepted_specs(attempts)
    specs = designed + await pool_phase(t.pool, ctx, plan, designed)
    evaluations = await _evaluate(t, ctx, specs)
    await t.commit_evaluate(ctx, unwalked(evaluations))
    await t.run(
        score_stage.score_round, ctx, unwalked(attempts), unwalked(evaluations), carried.ema
    )
    await t.run(
        memory_stage.remember, ctx, carried.memory, unwalked(attempts), unwalked(evaluations)
    )
    weights = await training_parent(ctx, wait=wait_for_parent)
    if ctx.config.run.train:
        weights = await _train_phase(t, ctx, evaluations, weights)
    else:
        await t.skip_training(ctx)
    published = await t.publish(ctx, weights)
    await t.heldout(ctx, published)
    return RoundOutcome(
        ctx.campaign_id, ctx.round, published, summarize_round(ctx.store, ctx.round)
    )


async def _evaluate(t: RoundTasks, ctx: RoundContext, specs: list[EnvSpec]) -> list[EnvEvaluation]:
    """The evaluate task mapped over ``specs``.

    On a Dask cluster the tasks run in the workers' processes, where this process's inference
    pool is not: each would launch a managed vLLM server of its own (``inference.backend:
    vllm``) on the port this one's holds, and fail. So the pooled server is brought to the
    round's weights here and held on them while the tasks play (the pool's version gate), and
    the tasks reach it as an external OpenAI-compatible server: its URL, the weights' model
    name. Dask must be local to this node then (infra/README.md, "Placement").
    """
    if not specs:
        return []
    cfg = ctx.config
    if cfg.run.task_runner != "dask" or cfg.inference.backend != "vllm":
        return await results(t.evaluate.map(unmapped(ctx), specs))
    async with held(cfg, ctx.weights):
        model = await serve_on_managed_vllm(cfg, ctx.weights)
        url = shared_vllm_server(cfg).server.base_url
        served = {"backend": "openai", "base_url": url, "served_model": model}
        inference = cfg.inference.model_copy(update=served)
        # inference is in no stage's cache key: the tasks' keys and stored plays are the same
        workers = dataclasses.replace(ctx, config=cfg.model_copy(update={"inference": inference}))
        return await results(t.evaluate.map(unmapped(workers), specs))


__all__ = ["RoundOutcome", "RoundTasks", "StageKey", "round_flow"]
