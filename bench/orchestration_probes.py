"""The orchestration benchmark's probes (``bench/orchestration.py``): a clock around what runs
outside every stage record (the flow's bookkeeping, backend handling, cache keys, Prefect
walking task parameters), a held-out stage that fails once, Prefect's own run times as its API
recorded them, and a calibration flow of no-op tasks (Prefect's fixed cost per task here)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

BOOKKEEPING = ("ensure_campaign", "carried_state", "summarize_round", "result_storage")


class Clock:
    """Seconds spent in named calls (from any thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def add(self, name: str, seconds: float) -> None:
        with self.lock:
            self.seconds[name] += seconds
            self.calls[name] += 1

    def reset(self) -> None:
        with self.lock:
            self.seconds.clear()
            self.calls.clear()

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self.lock:
            return {
                n: {"seconds": round(s, 3), "calls": self.calls[n]} for n, s in self.seconds.items()
            }

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - t0)

        return wrapper

    def timed_outermost(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Like :meth:`timed` for a function that may call itself: nested calls in the same
        thread are not counted again."""
        local = threading.local()

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                local.depth = depth
                if depth == 0:
                    self.add(name, time.perf_counter() - t0)

        return wrapper

    def timed_backend(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``shared_backend`` with its opening and closing timed (the body is not)."""

        @contextlib.asynccontextmanager
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            async with contextlib.AsyncExitStack() as stack:
                backend = await stack.enter_async_context(fn(*args, **kwargs))
                self.add("backend_open", time.perf_counter() - t0)
                try:
                    yield backend
                finally:
                    t1 = time.perf_counter()
                    await stack.aclose()
                    self.add("backend_close", time.perf_counter() - t1)

        return wrapper


@contextlib.contextmanager
def instrumented(clock: Clock) -> Iterator[None]:
    """Time what runs outside every stage record: the flow's bookkeeping calls and the task
    bodies' backend handling in flows/, the tasks' cache keys, and Prefect walking task
    parameters (``visit_collection``: finding upstream futures in, and resolving, every
    argument of every task call); the stages themselves are untouched."""
    import prefect.flow_engine
    import prefect.futures
    import prefect.task_engine
    import prefect.utilities.engine
    from prefect.cache_policies import TaskSource
    from prefect.utilities.collections import visit_collection

    import flows.round as rf
    from flows import design_tasks, pool_tasks

    with contextlib.ExitStack() as stack:
        for name in BOOKKEEPING:
            stack.enter_context(mock.patch.object(rf, name, clock.timed(name, getattr(rf, name))))
        timed_backend = clock.timed_backend(rf.shared_backend)
        for module in (rf, design_tasks, pool_tasks):  # every module whose tasks use a backend
            stack.enter_context(mock.patch.object(module, "shared_backend", timed_backend))
        for name, policy in (("cache_key_stage", rf.StageKey), ("cache_key_source", TaskSource)):
            timed = clock.timed(name, policy.compute_key)
            stack.enter_context(mock.patch.object(policy, "compute_key", timed))
        walk = clock.timed_outermost("visit_collection", visit_collection)
        modules = (
            prefect.utilities.engine,
            prefect.task_engine,
            prefect.futures,
            prefect.flow_engine,
        )
        for module in modules:
            stack.enter_context(mock.patch.object(module, "visit_collection", walk))
        yield


@contextlib.contextmanager
def heldout_fails_once() -> Iterator[dict[str, int]]:
    """The held-out stage raises on its first call; the flow's task does not retry it."""
    import flows.round as rf
    from spade.pipeline import heldout as heldout_module

    real = heldout_module.heldout
    calls = {"n": 0}

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected fault in the heldout stage (bench/orchestration.py)")
        return await real(*args, **kwargs)

    with (
        mock.patch.object(heldout_module, "heldout", flaky),
        mock.patch.object(rf, "heldout", rf.heldout.with_options(retries=0)),
    ):
        yield calls


def prefect_calibration(storage: Path, n: int = 20) -> dict[str, Any]:
    """What Prefect costs per task on this machine: a flow of ``n`` no-op tasks (results
    persisted with a cache key on their inputs, like the round's) against an empty flow."""
    from prefect import flow, task
    from prefect.cache_policies import INPUTS

    storage.mkdir(parents=True, exist_ok=True)

    @task(
        name="noop",
        persist_result=True,
        result_serializer="pickle",
        result_storage=storage,
        cache_policy=INPUTS,
    )
    def noop(i: int) -> int:
        return i

    @flow(name="bench-noop", persist_result=False)
    async def noop_flow(n: int) -> None:
        for i in range(n):
            noop(i)

    walls = {}
    for count in (0, n):
        t0 = time.perf_counter()
        asyncio.run(noop_flow(count))
        walls[count] = time.perf_counter() - t0
    return {
        "tasks": n,
        "empty_flow_wall_s": round(walls[0], 3),
        "flow_wall_s": round(walls[n], 3),
        "per_task_s": round((walls[n] - walls[0]) / n, 4),
    }


def busy(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


async def _read_runs(flow_run_id: Any) -> tuple[Any, list[Any]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        flow_run = await client.read_flow_run(flow_run_id)
        tasks = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])), limit=200
        )
    return flow_run, tasks


def prefect_times(flow_run_id: Any, timeout: float = 30.0) -> dict[str, Any]:
    """The flow run's Running time and its task runs' times, as the Prefect API recorded them
    (records arrive asynchronously: poll until every run is final and the count is stable)."""
    deadline, seen = time.monotonic() + timeout, -1
    while True:
        flow_run, runs = asyncio.run(_read_runs(flow_run_id))
        final = flow_run.state is not None and flow_run.state.is_final()
        final = final and all(r.state is not None and r.state.is_final() for r in runs)
        if (final and len(runs) == seen) or time.monotonic() > deadline:
            break
        seen = len(runs)
        time.sleep(0.5)
    intervals, per_task, gaps, last_end = [], {}, [], None
    for r in sorted(runs, key=lambda r: r.start_time.timestamp() if r.start_time else 0.0):
        if r.start_time and r.end_time:
            if last_end is not None:
                gaps.append(
                    {"before": r.name, "gap_s": round(r.start_time.timestamp() - last_end, 3)}
                )
            last_end = max(last_end or 0.0, r.end_time.timestamp())
    for r in runs:
        name = r.name.split("-")[0]
        entry = per_task.setdefault(name, {"runs": 0, "seconds": 0.0, "states": Counter()})
        entry["runs"] += 1
        entry["states"][r.state.name if r.state else "?"] += 1
        if r.start_time and r.end_time:
            span = (r.start_time.timestamp(), r.end_time.timestamp())
            intervals.append(span)
            entry["seconds"] += span[1] - span[0]
    running = None
    if flow_run.start_time and flow_run.end_time:
        running = (flow_run.end_time - flow_run.start_time).total_seconds()
    return {
        "flow_running_s": running,
        "task_busy_s": busy(intervals),
        "task_states": dict(Counter(r.state.name if r.state else "?" for r in runs)),
        "largest_gaps_between_task_runs": sorted(gaps, key=lambda g: -g["gap_s"])[:6],
        "per_task": {
            n: {"runs": e["runs"], "seconds": round(e["seconds"], 3), "states": dict(e["states"])}
            for n, e in per_task.items()
        },
    }
