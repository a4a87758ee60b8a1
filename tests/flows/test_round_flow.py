"""The round and campaign flows on a temporary local Prefect API (SQLite) against the scripted
OpenAI-compatible stand-in and a tiny random-weight policy for the training stages: exact
regrets, every stage committed in the store, cache hits on re-run, a failed training stage
re-runs alone, a second round carries memory, EMA and weights over, and replay rounds play the
last regeneration's environments again."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactCollectionFilter,
    ArtifactCollectionFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
)
from prefect.client.schemas.objects import TaskRun

from flows.campaign import campaign_flow
from flows.round import RoundOutcome, round_flow
from spade.config import load_config
from spade.pipeline import train as train_stages
from spade.pipeline.campaign import round_complete
from spade.pipeline.context import RoundContext
from spade.pipeline.keys import fingerprint
from spade.pipeline.record import campaign_store, read_jsonl
from spade.pipeline.state import carried_state
from spade.storage import STAGES
from spade.testing.scripted_designer import EXPECTED, tiny_policy_overrides

pytestmark = pytest.mark.sandbox


def _config(overrides, root, tiny_policy, **more: Any):
    return load_config(
        overrides={
            **overrides,
            "name": "flowtest",
            "storage.root": str(root),
            **tiny_policy_overrides(tiny_policy),
            "training.lr": 1e-3,
            "training.designer_lr": 1e-3,
            **more,
        }
    )


def _run_round(cfg, cid: str, r: int = 0):
    return asyncio.run(round_flow(config=cfg, campaign_id=cid, round_index=r, return_state=True))


async def _task_runs(flow_run_id: UUID) -> list[TaskRun]:
    async with get_client() as client:
        return await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )


def task_states(flow_run_id: UUID, expect: int, timeout: float = 30.0) -> dict[str, set[str]]:
    """Task-run name -> final state names (records reach the API asynchronously: poll)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = asyncio.run(_task_runs(flow_run_id))
        final = [r for r in runs if r.state is not None and r.state.is_final()]
        if (len(final) >= expect and len(final) == len(runs)) or time.monotonic() > deadline:
            out: dict[str, set[str]] = {}
            for r in final:
                out.setdefault(r.task_key.rsplit(".", 1)[-1].split("-")[0], set()).add(
                    str(r.state.name)  # type: ignore[union-attr]
                )
            return out
        time.sleep(0.3)


async def _artifacts(*keys: str) -> list[Any]:
    async with get_client() as client:
        out = []
        for key in keys:
            found = await client.read_latest_artifacts(
                artifact_filter=ArtifactCollectionFilter(
                    key=ArtifactCollectionFilterKey(any_=[key])
                )
            )
            out.append(found[0] if found else None)
        return out


def _regrets(cfg, cid: str, r: int = 0) -> dict[str, float]:
    cs = campaign_store(cfg, cid)
    rows = read_jsonl(cs, cs.layout.stage_key(r, "evaluate", "evaluations.jsonl"))
    return {row["env_id"]: row["regret"] for row in rows}


def test_round_commits_every_stage_caches_and_reruns_only_a_failed_training(
    prefect_api, scripted_server, scripted_overrides, tiny_policy, tmp_path, monkeypatch
):
    cfg = _config(scripted_overrides, tmp_path / "store", tiny_policy)
    cs = campaign_store(cfg, "c1")

    real_train = train_stages.train
    calls = {"n": 0}

    def flaky_train(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected fault in train_agent")
        return real_train(*args, **kwargs)

    monkeypatch.setattr(train_stages, "train", flaky_train)
    state = _run_round(cfg, "c1")
    assert state.is_failed()
    assert "train_agent" not in cs.completed_stages(0)
    before_training = list(STAGES[: STAGES.index("train_agent")])
    assert cs.completed_stages(0) == before_training
    requests = len(scripted_server.chat_requests)

    state = _run_round(cfg, "c1")
    assert state.is_completed(), state
    outcome = state.result()
    assert isinstance(outcome, RoundOutcome)
    states = task_states(state.state_details.flow_run_id, expect=10)
    before = ("sample_documents", "design", "verify", "settle", "hint", "evaluate", "score")
    for name in before:
        assert states[name] == {"Cached"}, (name, states)
    assert states["train"] == {"Completed"} and states["publish"] == {"Completed"}
    assert len(scripted_server.chat_requests) == requests  # no model call was repeated
    assert round_complete(cs, 0)
    assert sorted(_regrets(cfg, "c1").values()) == sorted(e["regret"] for e in EXPECTED.values())
    assert outcome.weights.version == "r0000-designer" and outcome.weights.checkpoint
    agent = cs.store.read_json(cs.layout.stage_key(0, "train_agent", "outcome.json"))
    assert agent["samples"] > 0 and agent["metrics"]["loss"] == agent["metrics"]["loss"]


def test_campaign_carries_memory_and_weights_and_resumes_by_id(
    prefect_api, scripted_server, scripted_overrides, tiny_policy, tmp_path
):
    cfg = _config(
        scripted_overrides,
        tmp_path / "store",
        tiny_policy,
        **{"run.rounds": 2, "run.regen_interval": 1},  # round 1 designs (replays: below)
    )
    status = asyncio.run(campaign_flow(config=cfg, campaign_id="camp"))
    assert [r["complete"] for r in status["rounds"]] == [True, True]
    cs = campaign_store(cfg, "camp")
    print({r["round"]: r["stage_seconds"] for r in status["rounds"]})
    # round 1 (other skills: the script designs nothing usable for them) starts from round 0's
    # memory, EMA and published weights
    memory0 = cs.store.read_json(cs.layout.stage_key(0, "memory", "memory.json"))
    memory1 = cs.store.read_json(cs.layout.stage_key(1, "memory", "memory.json"))
    assert len(memory0["records"]) == 3 and memory1 == memory0
    ema0 = cs.store.read_json(cs.layout.stage_key(0, "score", "ema.json"))
    # every stage's manifest names the weights the round serves and how stale they are
    served = {"served": "r0000-designer", "staleness": "0"}
    assert cs.read_stage_manifest(1, "score").inputs == served | {"ema": fingerprint(ema0)}
    assert cs.read_stage_manifest(1, "train_agent").inputs == served | {"parent": "r0000-designer"}
    carried = carried_state(RoundContext.open(cfg, "camp", 2))
    assert carried.weights.version == "r0000-designer" and carried.memory == memory1
    # the Prefect UI shows the per-round table and the links to the stored artifacts
    table, links = asyncio.run(_artifacts("camp-rounds", "camp-artifacts"))
    assert table is not None and links is not None
    rows = table.data if isinstance(table.data, list) else json.loads(str(table.data))
    assert [r["round"] for r in rows] == [0, 1]
    assert cs.store.url("campaign/camp/round-0001") in str(links.data)
    keys = set(cs.store.list(""))
    requests = len(scripted_server.chat_requests)
    again = asyncio.run(campaign_flow(config=cfg, campaign_id="camp"))
    assert len(again["rounds"]) == 2  # nothing re-run: both rounds were complete
    assert len(scripted_server.chat_requests) == requests
    assert {k for k in cs.store.list("") if "manifest" not in k} >= keys - {
        k for k in keys if "manifest" in k
    }


def _system_prompts(server, since: int) -> list[str]:
    return [r["messages"][0]["content"] for r in server.chat_requests[since:]]


def test_replay_rounds_play_the_last_regeneration_again(
    prefect_api, scripted_server, scripted_overrides, tiny_policy, tmp_path
):
    """regen_interval 2: round 0 designs, round 1 replays round 0's environments (no design or
    hint call; fresh plays, scores and agent training), round 2 is the next regeneration."""
    from spade.pipeline.replay import RoundPlan, read_plan
    from spade.pipeline.state import delayed_designer_batch
    from spade.pipeline.summary import summarize_round

    cfg = _config(scripted_overrides, tmp_path / "store", tiny_policy, **{"run.regen_interval": 2})
    cs = campaign_store(cfg, "rp")
    assert _run_round(cfg, "rp", 0).is_completed()
    seen = len(scripted_server.chat_requests)
    assert _run_round(cfg, "rp", 1).is_completed()
    prompts = _system_prompts(scripted_server, seen)
    assert prompts and not any(p.startswith(("You write correct", "You coach")) for p in prompts)
    assert [read_plan(cs, r) for r in (0, 1)] == [RoundPlan(0), RoundPlan(0, replay_of=0)]
    assert {s: cs.read_stage_manifest(1, s).status for s in ("design", "verify")} == {  # type: ignore[union-attr]
        "design": "skipped",
        "verify": "skipped",
    }
    # the same environments, hints and code, evaluated again with the round's weights
    envs0 = read_jsonl(cs, cs.layout.stage_key(0, "hint", "environments.jsonl"))
    envs1 = read_jsonl(cs, cs.layout.stage_key(1, "hint", "environments.jsonl"))
    assert envs1 == envs0 and len(envs0) == 3
    assert set(_regrets(cfg, "rp", 1)) == {e["env_id"] for e in envs0}
    agent1 = cs.store.read_json(cs.layout.stage_key(1, "train_agent", "outcome.json"))
    assert agent1["samples"] > 0  # the agent trains on the replayed plays
    assert (
        delayed_designer_batch(RoundContext.open(cfg, "rp", 1)) is None
    )  # nothing designed: the designer waits
    row = summarize_round(campaign_store(cfg, "rp"), 1)
    assert row["replay_of"] == 0 and row["designer_reward"] is None
    assert (row["attempts"], row["accepted"]) == (0, 3)  # nothing designed; 3 envs replayed
    # each environment once in memory, with its newest measurement
    memory1 = cs.store.read_json(cs.layout.stage_key(1, "memory", "memory.json"))
    ids = [r["env_id"] for r in memory1["records"]]
    assert sorted(ids) == sorted(e["env_id"] for e in envs0)
    assert {r["round"] for r in memory1["records"]} == {1}

    seen = len(scripted_server.chat_requests)
    assert _run_round(cfg, "rp", 2).is_completed()
    assert read_plan(cs, 2) == RoundPlan(1)  # the next regeneration
    assert any(p.startswith("You write correct") for p in _system_prompts(scripted_server, seen))
    assert cs.read_stage_manifest(2, "design").status == "completed"  # type: ignore[union-attr]
    # the dashboard tells the replay round apart too
    from spade.dashboard.data import CampaignData

    rounds = CampaignData(str(tmp_path / "store"), "rp", {}).overview().rounds
    assert [r.replay_of for r in rounds] == [None, 0, None]
    assert (rounds[1].attempts, rounds[1].accepted, rounds[1].designer_reward) == (0, 3, None)
