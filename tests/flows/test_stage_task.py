"""The generic task of a declared stage (flows.stages.stage_task): what a stage module with a
``run`` function gets without a task of its own in flows/."""

from __future__ import annotations

import inspect

import pytest

from flows.stages import StageKey, declared_stage, stage_task
from spade.pipeline.memory import remember
from spade.pipeline.score import score_round
from spade.pipeline.summary import summarize_round


def test_the_run_function_names_its_stage():
    assert declared_stage(remember).name == "memory"
    assert declared_stage(score_round).name == "score"
    with pytest.raises(ValueError, match="no declared stage"):
        declared_stage(summarize_round)


def test_the_task_is_the_stage_function_to_prefect():
    task = stage_task(remember)
    assert task.name == "memory"
    # Prefect binds the stage function's own parameters, and its source is the task's source
    # (TASK_SOURCE in the cache key): an edit of the stage function is a new key
    assert inspect.signature(task.fn) == inspect.signature(remember)
    assert inspect.getsource(task.fn) == inspect.getsource(remember)
    policy = task.cache_policy
    keys = [p for p in getattr(policy, "policies", [policy]) if isinstance(p, StageKey)]
    assert [(k.stage, k.commits) for k in keys] == [("memory", ("memory",))]


def test_waiting_for_mapped_tasks_leaves_the_event_loop_to_other_flows(prefect_api):
    """``results`` waits in a worker thread: a mapped task that needs something only another
    coroutine on the flow's loop provides (with run.overlap, the other round in flight) still
    finishes. Prefect's own blocking wait on the loop deadlocked here."""
    import asyncio
    import threading

    from prefect import flow, task

    from flows.stages import results

    released = threading.Event()

    @task
    async def waits(n: int) -> int:
        assert await asyncio.to_thread(released.wait, 10), "the loop never let the other run"
        return n

    async def other_round() -> None:
        await asyncio.sleep(0.2)  # runs only while the flow's loop is free
        released.set()

    @flow
    async def two_rounds() -> list[int]:
        helper = asyncio.create_task(other_round())
        done = await results(waits.map([1, 2]))
        await helper
        return done

    assert asyncio.run(two_rounds()) == [1, 2]
