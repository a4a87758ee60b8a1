"""Verify and evaluate fan out over a Dask LocalCluster (2 worker processes) with the same
results as the default thread runner."""

from __future__ import annotations

import asyncio

import pytest

from flows.campaign import campaign_flow
from spade.config import load_config
from spade.pipeline.record import campaign_store, read_jsonl
from spade.testing.openai_server import FakeOpenAIServer
from spade.testing.scripted_designer import ScriptedModel, round_overrides, write_corpus

pytestmark = pytest.mark.sandbox


def _round(tmp_path, runner: str) -> dict[str, object]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    with FakeOpenAIServer(script=ScriptedModel()) as server:
        overrides = round_overrides(server, write_corpus(tmp_path / "corpus.jsonl"))
        cfg = load_config(
            overrides={
                **overrides,
                "name": f"fanout-{runner}",
                "storage.root": str(tmp_path / runner),
                "run.train": False,
                "run.task_runner": runner,
                "run.dask_workers": 2,
            }
        )
        asyncio.run(campaign_flow(config=cfg, campaign_id="fanout", rounds=1))
    cs = campaign_store(cfg, "fanout")
    verdicts = read_jsonl(cs, cs.layout.stage_key(0, "verify", "attempts.jsonl"))
    evaluations = read_jsonl(cs, cs.layout.stage_key(0, "evaluate", "evaluations.jsonl"))
    return {
        "verdicts": sorted(
            (str(v["env_id"]), v["accepted"], str(v["failure_kind"])) for v in verdicts
        ),
        "evaluations": sorted(
            (e["env_id"], e["win_rate"], e["hinted_win_rate"], e["regret"]) for e in evaluations
        ),
    }


def test_dask_local_cluster_gives_the_thread_runners_results(prefect_api, tmp_path):
    threads = _round(tmp_path / "a", "thread")
    dask = _round(tmp_path / "b", "dask")
    assert dask == threads
    assert len(threads["evaluations"]) == 3
