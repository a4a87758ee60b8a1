"""What every task of the round shares: timeouts, retries, result persistence and the cache key.

Task results persist to the campaign's Prefect result storage as JSON (:mod:`flows.results`)
and are cached on a key of (the round its :class:`~spade.pipeline.context.RoundContext` names:
campaign id, round index, weights served; the task's data inputs; the config sections the stage
depends on; the source of the ``spade`` modules it runs: :mod:`spade.pipeline.keys`), plus the
task's own source (``TASK_SOURCE``): a re-run recomputes only what changed and what depends on
it. The context's store and policy objects are never hashed: the policy file's contents are in
the config hash of the stages that read it.

A task that commits a stage names it (``commits``): before a cached result is reused, the
outputs that stage's manifest records are verified (size and sha256); if one is missing or
corrupt the objects are logged and the stage's repair count (kept in the store, part of the
key) goes up, so the task runs again and rewrites them, and later resumes reuse that new result.

Writes retry: a task that writes to the store and has no retries of its own is retried on a
store failure (:class:`spade.errors.StorageError`, ``storage.write_retries``; see
:func:`store_retries`); the writes are deterministic-key overwrites, so a retry is harmless.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast, overload

from prefect import Task, task
from prefect.cache_policies import TASK_SOURCE, CachePolicy
from prefect.context import TaskRunContext
from prefect.futures import PrefectFutureList
from prefect.tasks import exponential_backoff
from prefect.utilities.annotations import quote
from prefect.utilities.hashing import hash_objects

from flows.results import ResultSerializer
from spade.config import CampaignConfig
from spade.errors import StorageError
from spade.pipeline.context import RoundContext
from spade.pipeline.keys import config_hash, stage_code_version
from spade.pipeline.stage import Stage, declared_in

logger = logging.getLogger(__name__)

# Timeouts (seconds): they stop a hung stage, not a slow one.
VERIFY_TIMEOUT_S = 10 * 60
INFERENCE_TIMEOUT_S = 4 * 3600
TRAIN_TIMEOUT_S = 8 * 3600
IO_TIMEOUT_S = 30 * 60
INFERENCE_RETRIES = 2
BACKOFF = exponential_backoff(backoff_factor=10)  # 10 s, 20 s, ...: run.retry_backoff_s's default


@dataclass(kw_only=True)
class StageKey(CachePolicy):
    """Cache key: the stage's config sections with the contents of the files they name, its
    library code version and its other inputs.

    ``TASK_SOURCE`` (added to it below) covers the thin task body; this covers the ``spade``
    modules behind the stage (its import closure, ``spade.pipeline.keys``) and the files it
    reads (policy, corpus, held-out environments, ...), so a stage whose code or input file
    changed recomputes.
    """

    stage: str = ""
    commits: tuple[str, ...] = ()  # stages whose manifest it writes ("train_{data.role}")
    under: str = ""  # only their outputs named so ("envs/{env.env_id}/"): a mapped task's share
    per_round: bool = True  # False: a result shared by every round and campaign (pool verdicts)

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        ctx: RoundContext = inputs["ctx"]
        # the round's identity, never the store or the policy objects (the policy file's
        # contents are in config_hash, for the stages whose config sections name it)
        scope = [ctx.campaign_id, ctx.round, ctx.weights] if self.per_round else []
        rest = {k: v for k, v in inputs.items() if k != "ctx"}
        key = hash_objects(
            self.stage,
            config_hash(ctx.config, self.stage),
            stage_code_version(self.stage),
            scope,
            rest,
        )
        repairs = self.repairs(ctx, inputs) if key is not None else []
        return hash_objects(key, "repairs", repairs) if any(repairs) else key

    def repairs(self, ctx: RoundContext, inputs: dict[str, Any]) -> list[int]:
        """Per stage this task committed: how often its outputs were found missing or corrupt,
        counting (and logging) what is damaged now. A new count is a new key: the task runs
        again, and later resumes reuse that result, not the one from before the damage."""
        if not self.commits:
            return []
        cs, r, under = ctx.store, ctx.round, self.under.format(**inputs)
        counts = []
        for stage in (s.format(**inputs) for s in self.commits):
            problems = cs.verify_stage(r, stage, under)
            for line in problems:
                logger.warning("round %d stage %s: recomputing, its output is %s", r, stage, line)
            counts.append(cs.repairs(r, stage, under, bump=bool(problems)))
        return counts


def cached(
    stage: str, commits: tuple[str, ...] = (), under: str = "", *, per_round: bool = True
) -> CachePolicy:
    return StageKey(stage=stage, commits=commits, under=under, per_round=per_round) + TASK_SOURCE


def store_failure(task: Any, task_run: Any, state: Any) -> bool:
    """``retry_condition_fn``: retry a failure of the object store, nothing else (a bug in
    our code fails at once)."""
    return isinstance(state.data, StorageError)


def store_retries(config: CampaignConfig) -> dict[str, Any]:
    """Task options that retry a store failure, ``storage.write_retries`` times."""
    return {
        "retries": config.storage.write_retries,
        "retry_delay_seconds": config.storage.write_retry_delay_s,
        "retry_condition_fn": store_failure,
    }


def stage_backoff(config: CampaignConfig) -> dict[str, Any]:
    """Task options for a task that retries any failure (declared with :data:`BACKOFF`): its
    retries wait ``run.retry_backoff_s``, then twice that, and so on."""
    return {"retry_delay_seconds": exponential_backoff(backoff_factor=config.run.retry_backoff_s)}


def unwalked[T](value: T) -> T:
    """``value`` passed to a task as it is: Prefect does not walk it looking for futures (the
    cost grows with the data: trajectories, attempts). It is Prefect's ``quote``, typed as the
    value, since Prefect unwraps it before the task runs (so mypy checks the call)."""
    return cast(T, quote(value))


async def results[R](futures: PrefectFutureList[Coroutine[Any, Any, R]]) -> list[R]:
    """The results of a mapped async task, waited for in a worker thread: Prefect's wait blocks,
    and on the event loop it would stall every other flow on it. With ``run.overlap`` that is
    the other round in flight, and a deadlock when this round's tasks wait for it (a resumed
    overlapped demo hung: round 2's evaluate held the loop, its plays waited at the inference
    pool's version gate for round 1's held-out stage, which could not run). (Prefect's
    overloads of ``Task.map`` type an async task's futures as coroutines; their results are
    the values.)"""
    return cast(list[R], await asyncio.to_thread(futures.result))


def bind[**P, R](
    task: Task[P, R], storage: Any, retries: dict[str, Any] | None = None
) -> Task[P, R]:
    """``task`` persisting its results to ``storage`` (the campaign's result storage), with
    ``retries``: :func:`store_retries` for a task that writes and has no retries of its own,
    :func:`stage_backoff` for one that retries any failure."""
    return task.with_options(result_storage=storage, **(retries or {}))


PERSIST: dict[str, Any] = {"persist_result": True, "result_serializer": ResultSerializer()}
IO: dict[str, Any] = {"timeout_seconds": IO_TIMEOUT_S, **PERSIST}
"""A task that reads and writes the store (no model, no jail): persisted, stopped when hung."""
INFERENCE: dict[str, Any] = {
    "retries": INFERENCE_RETRIES,
    "retry_delay_seconds": BACKOFF,
    "retry_jitter_factor": 0.5,
    "timeout_seconds": INFERENCE_TIMEOUT_S,
    **PERSIST,
}


def declared_stage(fn: Callable[..., Any]) -> Stage:
    """The stage whose module declares ``fn`` as its ``run`` (:mod:`spade.pipeline.stage`);
    ValueError when none does."""
    for stage in declared_in(importlib.import_module(fn.__module__)):
        if stage.run is fn:
            return stage
    raise ValueError(f"{fn.__module__}.{fn.__qualname__} is no declared stage's run function")


def stage_task(fn: Callable[..., Any]) -> Task[..., Any]:
    """The generic task of a declared stage: named after it, cached on its key (committing it),
    persisted, and calling ``fn`` (in a worker thread when it is sync: it writes to the store).

    The task wraps ``fn`` (``functools.wraps``), so Prefect binds ``fn``'s own parameters and
    its source is the task's source (``TASK_SOURCE``)."""
    stage = declared_stage(fn)
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **kwargs)

    else:

        @functools.wraps(fn)
        async def run(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(fn, *args, **kwargs)

    run.__name__ = run.__qualname__ = stage.name  # the task's key names the stage, as its name
    return task(
        name=stage.name,
        cache_policy=cached(stage.name, commits=(stage.name,)),
        **IO,
    )(run)


class StageTasks:
    """Runs declared stages (their ``run`` functions) as their generic tasks, persisting to the
    campaign's result ``storage`` and retrying a store failure (``retries``)."""

    def __init__(self, storage: Any, retries: dict[str, Any]) -> None:
        self._storage, self._retries = storage, retries
        self._tasks: dict[Callable[..., Any], Task[..., Any]] = {}

    @overload
    async def run[**P, R](
        self, fn: Callable[P, Coroutine[Any, Any, R]], *args: P.args, **kwargs: P.kwargs
    ) -> R: ...

    @overload
    async def run[**P, R](self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R: ...

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` as its stage's task (built once per round)."""
        if fn not in self._tasks:
            self._tasks[fn] = bind(stage_task(fn), self._storage, self._retries)
        return await self._tasks[fn](*args, **kwargs)
