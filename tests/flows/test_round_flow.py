"""The round as a Prefect flow, on a temporary local Prefect API (SQLite), against the scripted
OpenAI-compatible stand-in: the exact regrets come out, and a second run of the same round
comes back from the cache."""

from __future__ import annotations

import asyncio
import time
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.client.schemas.objects import State, TaskRun
from prefect.testing.utilities import prefect_test_harness

from flows.round import EVALUATE_CODE, RoundResult, results_path, round_flow
from spade.config import load_config
from tests.integration.scripted_designer import check_expected_round

pytestmark = pytest.mark.sandbox

STAGES = ("design", "evaluate", "score")


@pytest.fixture(scope="module")
def prefect_api():
    """A temporary Prefect API (SQLite) for this module; analytics off ("database is locked")."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        with prefect_test_harness(server_startup_timeout=60):
            yield


def _config(overrides, root):
    return load_config(overrides={**overrides, "name": "flowtest", "storage.root": str(root)})


async def _flow_state(cfg) -> State[RoundResult]:
    return await round_flow(config=cfg, round_index=0, return_state=True)


def _run(cfg) -> tuple[UUID, RoundResult]:
    state = asyncio.run(_flow_state(cfg))
    assert state.is_completed(), state
    result = state.result()
    assert isinstance(result, RoundResult)
    assert state.state_details.flow_run_id is not None
    return state.state_details.flow_run_id, result


async def _task_runs(flow_run_id: UUID) -> list[TaskRun]:
    async with get_client() as client:
        return await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )


def _final_task_states(flow_run_id: UUID, timeout: float = 20.0) -> dict[str, str]:
    """Task name -> final state name; task-run records reach the API asynchronously."""
    deadline = time.monotonic() + timeout
    while True:
        runs = asyncio.run(_task_runs(flow_run_id))
        states = {r.name.split("-r")[0]: str(r.state.name) for r in runs if r.state is not None}
        done = all(r.state is not None and r.state.is_final() for r in runs)
        if (set(states) >= set(STAGES) and done) or time.monotonic() > deadline:
            return states
        time.sleep(0.2)


def _check_regrets(result: RoundResult) -> None:
    check_expected_round(result.attempts, result.evaluations)
    assert sorted((r.skill, r.regret) for r in result.memory_records) == [
        ("logical_deduction", 0.0),
        ("mathematical_reasoning", 1.0),
        ("spatial_reasoning", 0.5),
    ]
    assert len(result.scored) == len(result.attempts) == 5


def test_round_flow_gives_the_exact_regrets_and_caches_on_rerun(
    prefect_api, scripted_server, scripted_overrides, tmp_path, monkeypatch
):
    server = scripted_server
    cfg = _config(scripted_overrides, tmp_path / "store")

    first_id, first = _run(cfg)
    _check_regrets(first)
    assert {r["regret"] for r in first.summary()["environments"]} == {1.0, 0.0, 0.5}
    states = _final_task_states(first_id)
    assert states == {"design": "Completed", "evaluate": "Completed", "score": "Completed"}
    # the persisted results live under the config's storage root
    assert any(results_path(cfg).iterdir())
    requests_after_first = len(server.chat_requests)

    second_id, second = _run(cfg)
    assert second_id != first_id
    _check_regrets(second)
    states = _final_task_states(second_id)
    assert states == {"design": "Cached", "evaluate": "Cached", "score": "Cached"}
    assert len(server.chat_requests) == requests_after_first  # the model was not asked again

    # A change in the library code behind evaluate recomputes evaluate, not design.
    monkeypatch.setattr(EVALUATE_CODE, "modules", (*EVALUATE_CODE.modules, "spade.agent"))
    third_id, third = _run(cfg)
    _check_regrets(third)
    states = _final_task_states(third_id)
    assert states["design"] == "Cached" and states["evaluate"] == "Completed", states
    assert len(server.chat_requests) > requests_after_first  # evaluate played again
