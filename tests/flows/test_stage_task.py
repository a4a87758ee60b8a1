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
