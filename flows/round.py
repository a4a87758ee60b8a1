"""One SPADE round as a Prefect flow: every stage of DESIGN.md §2 is its own task.

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

Each task is a thin wrapper over a ``spade.pipeline`` function, which writes the stage's
artifacts and manifest to the object store. Task results persist to the campaign's Prefect
result storage and are cached on a key of (the task's data inputs, the config sections the stage
depends on, the source of the ``spade`` modules it runs): a re-run recomputes only what changed
and what depends on it. Inference and I/O stages retry with backoff; sandbox stages have
timeouts; training never retries blindly (a failed update is looked at, then re-run).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from prefect import flow, task, unmapped
from prefect.cache_policies import TASK_SOURCE, CachePolicy
from prefect.concurrency.asyncio import concurrency
from prefect.context import TaskRunContext
from prefect.tasks import exponential_backoff
from prefect.utilities.annotations import quote
from prefect.utilities.hashing import hash_objects

from flows.storage import result_storage, task_runner
from spade.agent.evaluate import EnvEvaluation, EnvSpec
from spade.config import CampaignConfig
from spade.designer.corpus import Document
from spade.designer.designer import DesignAttempt, awaiting_verdict, needs_repair
from spade.inference.pool import WeightsRef, shared_backend
from spade.metrics.prom import start_metrics_server
from spade.pipeline import design as design_stages
from spade.pipeline import evaluate as evaluate_stages
from spade.pipeline import heldout as heldout_stage
from spade.pipeline import pool as pool_stage
from spade.pipeline import replay as replay_stage
from spade.pipeline import score as score_stages
from spade.pipeline import train as train_stages
from spade.pipeline.campaign import ensure_campaign
from spade.pipeline.keys import config_hash, stage_code_version
from spade.pipeline.pool import PoolEnv
from spade.pipeline.replay import RoundPlan, plan_round
from spade.pipeline.score import RoundScores
from spade.pipeline.state import carried_state, delayed_designer_batch
from spade.pipeline.summary import round_summary
from spade.pipeline.train import Role
from spade.verify import Verdict

# Timeouts (seconds): they stop a hung stage, not a slow one.
VERIFY_TIMEOUT_S = 10 * 60
INFERENCE_TIMEOUT_S = 4 * 3600
TRAIN_TIMEOUT_S = 8 * 3600
IO_TIMEOUT_S = 30 * 60
INFERENCE_RETRIES = 2
BACKOFF = exponential_backoff(backoff_factor=10)  # 10 s, 20 s, ...


@dataclass(kw_only=True)
class StageKey(CachePolicy):
    """Cache key: the stage's config sections, its library code version and its other inputs.

    ``TASK_SOURCE`` (added to it below) covers the thin task body; this covers the ``spade``
    modules behind the stage (``spade.pipeline.keys``), so a changed stage recomputes.
    """

    stage: str = ""

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        config = inputs["config"]
        rest = {k: v for k, v in inputs.items() if k != "config"}
        return hash_objects(
            self.stage, config_hash(config, self.stage), stage_code_version(self.stage), rest
        )


def _cached(stage: str) -> CachePolicy:
    return StageKey(stage=stage) + TASK_SOURCE


_PERSIST: dict[str, Any] = {"persist_result": True, "result_serializer": "pickle"}
_INFERENCE: dict[str, Any] = {
    "retries": INFERENCE_RETRIES,
    "retry_delay_seconds": BACKOFF,
    "retry_jitter_factor": 0.5,
    "timeout_seconds": INFERENCE_TIMEOUT_S,
    **_PERSIST,
}


@task(
    name="sample_documents",
    retries=2,
    retry_delay_seconds=BACKOFF,
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=_cached("sample_documents"),
    **_PERSIST,
)
async def sample_documents(
    config: CampaignConfig, campaign_id: str, round_index: int, plan: RoundPlan
) -> list[Document]:
    """One grounding document per possible design attempt."""
    return await asyncio.to_thread(
        design_stages.sample_documents, config, campaign_id, round_index, plan
    )


@task(name="replay", timeout_seconds=IO_TIMEOUT_S, cache_policy=_cached("hint"), **_PERSIST)
async def replay(
    config: CampaignConfig, campaign_id: str, round_index: int, plan: RoundPlan
) -> list[DesignAttempt]:
    """A replay round's design half: the environments of the last regeneration, carried."""
    return await asyncio.to_thread(replay_stage.replay, config, campaign_id, round_index, plan)


@task(
    name="design",
    task_run_name="design-r{round_index}-a{attempt}",
    cache_policy=_cached("design"),
    **_INFERENCE,
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
    cache_policy=_cached("verify"),
    **_PERSIST,
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


@task(name="settle", timeout_seconds=IO_TIMEOUT_S, cache_policy=_cached("verify"), **_PERSIST)
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
    cache_policy=_cached("design"),
    **_INFERENCE,
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


@task(name="hint", task_run_name="hint-r{round_index}", cache_policy=_cached("hint"), **_INFERENCE)
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
    cache_policy=_cached("sample_documents"),
    **_PERSIST,
)
async def skip_design(
    config: CampaignConfig, campaign_id: str, round_index: int, plan: RoundPlan
) -> list[DesignAttempt]:
    """Pool mode: record the plan, commit the design-side stages as skipped; no attempt."""
    return await asyncio.to_thread(pool_stage.skip_design, config, campaign_id, round_index, plan)


@task(
    name="verify_pool",
    retries=1,
    timeout_seconds=VERIFY_TIMEOUT_S,
    cache_policy=_cached("verify"),
    **_PERSIST,
)
async def verify_pool(config: CampaignConfig, code: str) -> Verdict:
    """The verifier's checks on one pool environment, in nsjail; cached by code (and the
    sandbox config and verifier source), so a pool file is verified once, not every round."""
    return await asyncio.to_thread(pool_stage.verify_pool_env, config, code)


@task(
    name="fill_pool",
    task_run_name="pool-r{round_index}",
    cache_policy=_cached("pool"),
    **_INFERENCE,
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


@task(name="replay_pool", timeout_seconds=IO_TIMEOUT_S, cache_policy=_cached("pool"), **_PERSIST)
async def replay_pool(
    config: CampaignConfig, campaign_id: str, round_index: int, plan: RoundPlan
) -> list[EnvSpec]:
    """A replay round's pool stage: the replayed regeneration's pool environments."""
    return await asyncio.to_thread(pool_stage.replay, config, campaign_id, round_index, plan)


@task(name="skip_pool", timeout_seconds=IO_TIMEOUT_S, cache_policy=_cached("pool"), **_PERSIST)
async def skip_pool(
    config: CampaignConfig, campaign_id: str, round_index: int, reason: str
) -> list[EnvSpec]:
    """Commit the pool stage as skipped (enough designs, or no fill configured)."""
    return await asyncio.to_thread(pool_stage.skip, config, campaign_id, round_index, reason)


@task(
    name="evaluate",
    task_run_name="evaluate-r{round_index}-{env.env_id}",
    cache_policy=_cached("evaluate"),
    **_INFERENCE,
)
async def evaluate(
    config: CampaignConfig, campaign_id: str, round_index: int, env: EnvSpec, weights: WeightsRef
) -> EnvEvaluation:
    """Hinted and unhinted plays of one environment."""
    async with shared_backend(config, weights) as backend:
        return await evaluate_stages.evaluate_env(config, campaign_id, round_index, env, backend)


@task(
    name="commit_evaluate",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=_cached("evaluate"),
    **_PERSIST,
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


@task(name="score", timeout_seconds=IO_TIMEOUT_S, cache_policy=_cached("score"), **_PERSIST)
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


@task(name="memory", timeout_seconds=IO_TIMEOUT_S, cache_policy=_cached("memory"), **_PERSIST)
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
    cache_policy=_cached("train_agent"),
    **_PERSIST,
)
async def train(
    config: CampaignConfig,
    campaign_id: str,
    round_index: int,
    role: str,
    data: Any,
    parent: WeightsRef,
) -> train_stages.TrainOutcome:
    """One GRPO update (no retries: a failed update is looked at, then re-run)."""
    limit = config.run.gpu_concurrency_limit
    if limit is None:
        return train_stages.train(config, campaign_id, round_index, role, data, parent)  # type: ignore[arg-type]
    async with concurrency(limit, occupy=1, strict=True):
        return train_stages.train(config, campaign_id, round_index, role, data, parent)  # type: ignore[arg-type]


@task(
    name="skip_training",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=_cached("train_agent"),
    **_PERSIST,
)
async def skip_training(config: CampaignConfig, campaign_id: str, round_index: int) -> None:
    """Commit both training stages as skipped (``run.train`` is off)."""
    await asyncio.to_thread(train_stages.skip_training, config, campaign_id, round_index)


@task(
    name="skip_role",
    timeout_seconds=IO_TIMEOUT_S,
    cache_policy=_cached("train_designer"),
    **_PERSIST,
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
    cache_policy=_cached("publish"),
    **_PERSIST,
)
async def publish(
    config: CampaignConfig, campaign_id: str, round_index: int, weights: WeightsRef
) -> WeightsRef:
    """Make the trained weights what the next round serves."""
    return await train_stages.publish(config, campaign_id, round_index, weights)


@task(name="heldout", cache_policy=_cached("heldout"), **_INFERENCE)
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


async def _design_phase(
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


async def _pool_phase(
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
    """One self-play round of a campaign; its state comes from the previous round's outputs."""
    cid, r = campaign_id, round_index
    start_metrics_server(config.metrics.prometheus_port)  # None: off; once per process
    t = _bound(await result_storage(config))
    ensure_campaign(config, cid)
    carried = carried_state(config, cid, r)
    plan = plan_round(config, cid, r)
    if config.run.env_source == "pool" and plan.designs:
        attempts = list(await t.skip_design(config, cid, r, plan))
    else:
        attempts = await _design_phase(t, config, cid, r, carried.memory, carried.weights)
    designed = design_stages.accepted_specs(attempts)
    specs = designed + await _pool_phase(t, config, cid, r, plan, designed, carried.weights)
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


def _bound(storage: Any) -> Any:
    """Every task of the round, persisting its results to ``storage``."""
    tasks: dict[str, Any] = {
        "sample_documents": sample_documents,
        "replay": replay,
        "design": design,
        "verify": verify,
        "settle": settle,
        "repair": repair,
        "hint": hint,
        "skip_design": skip_design,
        "verify_pool": verify_pool,
        "fill_pool": fill_pool,
        "replay_pool": replay_pool,
        "skip_pool": skip_pool,
        "evaluate": evaluate,
        "commit_evaluate": commit_evaluate,
        "score": score,
        "remember": remember,
        "train": train,
        "skip_training": skip_training,
        "skip_role": skip_role,
        "publish": publish,
        "heldout": heldout,
    }
    return SimpleNamespace(**{n: t.with_options(result_storage=storage) for n, t in tasks.items()})


__all__ = ["RoundOutcome", "StageKey", "round_flow", "task_runner"]
