"""A round on a flaky object store (tests/fakes/flaky_fs.py: writes of chosen keys fail once):
each stage kind that writes retries and the round completes with every stage committed. Then
a finished round whose outputs are damaged (a JSONL truncated, an output deleted) is resumed:
exactly the stages owning them run again, the damage is reported, nothing else is recomputed.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

import tests.fakes.flaky_fs  # noqa: F401  (registers flaky://)
from flows.campaign import campaign_flow
from flows.round import round_flow
from spade.config import load_config
from spade.errors import LeaseHeldError
from spade.pipeline.campaign import round_complete
from spade.pipeline.record import campaign_store
from spade.storage import STAGES
from spade.testing.scripted_designer import tiny_policy_overrides
from tests.fakes.flaky_fs import FlakyFS

pytestmark = [pytest.mark.sandbox, pytest.mark.attack]

FAULTS = {  # task -> the write of its stage that fails once
    "sample_documents": "*/round-0000/sample_documents/manifest.json",
    "settle": "*/round-0000/verify/manifest.json",  # design side
    "hint": "*/round-0000/hint/environments.jsonl",
    "evaluate": "*/round-0000/evaluate/envs/*/summary.json",  # one environment's plays
    "commit_evaluate": "*/round-0000/evaluate/evaluations.jsonl",
    "score": "*/round-0000/score/ema.json",
    "memory": "*/round-0000/memory/manifest.json",
    "train": "*/round-0000/train_agent/outcome.json",
    "publish": "*/round-0000/publish/weights.json",
    "heldout": "*/round-0000/heldout/manifest.json",
}


@pytest.fixture(autouse=True)
def _no_faults():
    yield
    FlakyFS.reset()


async def _run_counts(flow_run_id) -> dict[str, int]:
    """Task name -> the most runs any of its task runs took (2: retried once).

    Task-run records reach the API asynchronously after the flow returns, so this reads until
    every task run is in a final state and two reads agree (a retried run read too early still
    counts 1).
    """
    previous: dict[str, int] | None = None
    async with get_client() as client:
        for _ in range(120):  # a poll, not a time bound: it returns what it read last
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )
            out: dict[str, int] = {}
            for r in runs:
                name = r.task_key.rsplit(".", 1)[-1].split("-")[0]
                out[name] = max(out.get(name, 0), r.run_count)
            final = all(r.state is not None and r.state.is_final() for r in runs)
            if final and out == previous:
                break
            previous = out
            await asyncio.sleep(0.25)
    return out


def test_every_write_stage_retries_a_transient_store_failure_and_resume_repairs_damage(
    prefect_api, scripted_server, scripted_overrides, tiny_policy, tmp_path, caplog
):
    cfg = load_config(
        overrides={
            **scripted_overrides,
            "name": "flaky",
            "storage.root": f"flaky://local{tmp_path}/store",
            "storage.write_retry_delay_s": 0,
            "run.retry_backoff_s": 0,  # the stages that retry any failure, at once
            **tiny_policy_overrides(tiny_policy),
        }
    )
    faults = {task: FlakyFS.fail(pattern) for task, pattern in FAULTS.items()}
    state = asyncio.run(round_flow(config=cfg, campaign_id="f1", round_index=0, return_state=True))
    assert state.is_completed(), state
    cs = campaign_store(cfg, "f1")
    assert round_complete(cs, 0) and cs.unverified_stages(0) == {}
    assert {t: len(f.failed) for t, f in faults.items()} == dict.fromkeys(FAULTS, 1)
    counts = asyncio.run(_run_counts(state.state_details.flow_run_id))
    retried = {t for t in FAULTS if counts.get(t, 0) >= 2}
    assert retried == set(FAULTS), counts
    assert counts["score"] == 2 and counts["design"] == 1  # once more, not more

    # damage the finished round: one JSONL cut short, one output gone
    finished = {s: cs.read_stage_manifest(0, s).finished for s in STAGES}  # type: ignore[union-attr]
    rows = cs.layout.stage_key(0, "evaluate", "evaluations.jsonl")
    cs.store.write_bytes(rows, cs.store.read_bytes(rows)[:-10])
    ema = cs.layout.stage_key(0, "score", "ema.json")
    cs.store.delete(ema)
    requests = len(scripted_server.chat_requests)
    caplog.set_level(logging.WARNING)
    status = asyncio.run(campaign_flow(config=cfg, campaign_id="f1", rounds=1))
    assert status["rounds"][0]["complete"]
    assert len(scripted_server.chat_requests) == requests  # no design, hint or play again
    again = {s: cs.read_stage_manifest(0, s).finished for s in STAGES}  # type: ignore[union-attr]
    assert {s for s in STAGES if again[s] != finished[s]} == {"evaluate", "score"}
    assert cs.unverified_stages(0) == {} and cs.store.exists(ema)
    reported = caplog.text
    assert (
        f"corrupt {cs.store.url(rows)}" in reported and f"missing {cs.store.url(ema)}" in reported
    )
    assert cs.repairs(0, "score") == 1 and cs.repairs(0, "memory") == 0

    # resumed again: the repaired results are the cached ones now; nothing runs
    asyncio.run(campaign_flow(config=cfg, campaign_id="f1", rounds=1))
    assert {s: cs.read_stage_manifest(0, s).finished for s in STAGES} == again  # type: ignore[union-attr]
    assert len(scripted_server.chat_requests) == requests


def test_a_second_run_of_a_campaign_fails_at_once_naming_the_first(prefect_api, tmp_path):
    from spade.pipeline.campaign import LEASE_FILE
    from spade.storage.lease import Lease

    cfg = load_config(overrides={"storage.root": str(tmp_path / "store"), "name": "busy"})
    cs = campaign_store(cfg, "busy")
    with Lease(cs.store, f"campaign/busy/{LEASE_FILE}", 600) as first:
        state = asyncio.run(
            campaign_flow(config=cfg, campaign_id="busy", rounds=1, return_state=True)
        )
    assert state.is_failed()
    with pytest.raises(LeaseHeldError, match="campaign 'busy' is held by") as err:
        state.result()
    assert first.owner in str(err.value)
    assert cs.rounds() == []  # nothing ran


POOL_FAULTS = {  # pool mode's design half, the skipped designer, and a replay round
    "skip_design": "*/round-0000/sample_documents/plan.json",
    "skip_role": "*/round-0000/train_designer/outcome.json",
    "replay": "*/round-0001/hint/environments.jsonl",
    "replay_pool": "*/round-0001/pool/manifest.json",
}


@pytest.fixture
def pool_server():
    """The stand-in of the closed-loop tests (designs never pass; pool mode asks none)."""
    from spade.testing.openai_server import FakeOpenAIServer
    from tests.flows.test_closed_loop import NothingPasses

    with FakeOpenAIServer(script=NothingPasses()) as fake:
        yield fake


def test_pool_mode_and_replay_stages_retry_a_transient_store_failure(
    prefect_api, pool_server, tiny_policy, tmp_path
):
    from tests.flows.test_closed_loop import _config

    cfg = _config(
        pool_server,
        tmp_path,
        tiny_policy,
        0,
        **{
            "run.env_source": "pool",
            "run.min_envs": 0,
            "run.regen_interval": 2,
            "training.lora.enabled": False,  # a LoRA on a remote store cannot be published
            "storage.root": f"flaky://local{tmp_path}/store",
            "storage.write_retry_delay_s": 0,
            "run.retry_backoff_s": 0,  # the stages that retry any failure, at once
        },
    )
    faults = {task: FlakyFS.fail(pattern) for task, pattern in POOL_FAULTS.items()}
    counts: dict[str, int] = {}
    for r in (0, 1):
        state = asyncio.run(
            round_flow(config=cfg, campaign_id="p1", round_index=r, return_state=True)
        )
        assert state.is_completed(), state
        for task, n in asyncio.run(_run_counts(state.state_details.flow_run_id)).items():
            counts[task] = max(counts.get(task, 0), n)
    cs = campaign_store(cfg, "p1")
    assert round_complete(cs, 0) and round_complete(cs, 1)
    assert {t: len(f.failed) for t, f in faults.items()} == dict.fromkeys(POOL_FAULTS, 1)
    assert {t: counts.get(t) for t in POOL_FAULTS} == dict.fromkeys(POOL_FAULTS, 2), counts
