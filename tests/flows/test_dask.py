"""Verify and evaluate fan out over a Dask cluster's worker processes, with the same results
as the default thread runner: each stored verdict and evaluation says which worker ran it
(``ran_on``), and those are the workers the cluster reports, not the flow's process. A
``spade-round`` run on its own (a deployment's entry point) honours ``run.task_runner`` too."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from flows.campaign import campaign_flow
from flows.round import round_flow
from spade.config import CampaignConfig, load_config
from spade.pipeline.record import campaign_store, read_jsonl
from spade.testing.openai_server import FakeOpenAIServer
from spade.testing.scripted_designer import ScriptedModel, round_overrides, write_corpus

pytestmark = pytest.mark.sandbox


def _config(tmp_path, server, runner: str, **more: object) -> CampaignConfig:
    overrides = round_overrides(server, write_corpus(tmp_path / "corpus.jsonl"))
    return load_config(
        overrides={
            **overrides,
            "name": f"fanout-{runner}",
            "storage.root": str(tmp_path / runner),
            "run.train": False,
            "run.task_runner": runner,
            "run.dask_workers": 2,
            **more,
        }
    )


def _results(cfg: CampaignConfig, cid: str) -> dict[str, Any]:
    """The round's verdicts and evaluations, and where each verification and evaluation ran."""
    cs = campaign_store(cfg, cid)
    attempts = read_jsonl(cs, cs.layout.stage_key(0, "verify", "attempts.jsonl"))
    evaluations = read_jsonl(cs, cs.layout.stage_key(0, "evaluate", "evaluations.jsonl"))
    verdicts = cs.store.list(cs.layout.stage_key(0, "verify", "verdicts"))
    summaries = [
        cs.layout.stage_key(0, "evaluate", f"envs/{e['env_id']}/summary.json") for e in evaluations
    ]
    return {
        "verdicts": sorted(
            (str(v["env_id"]), v["accepted"], str(v["failure_kind"])) for v in attempts
        ),
        "evaluations": sorted(
            (e["env_id"], e["win_rate"], e["hinted_win_rate"], e["regret"]) for e in evaluations
        ),
        "verify_ran_on": [cs.store.read_json(k)["ran_on"] for k in verdicts],
        "evaluate_ran_on": [cs.store.read_json(k)["ran_on"] for k in summaries],
    }


def _campaign_round(tmp_path, runner: str) -> dict[str, Any]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    with FakeOpenAIServer(script=ScriptedModel()) as server:
        cfg = _config(tmp_path, server, runner)
        asyncio.run(campaign_flow(config=cfg, campaign_id="fanout", rounds=1))
    return _results(cfg, "fanout")


def test_dask_local_cluster_gives_the_thread_runners_results(prefect_api, tmp_path):
    threads = _campaign_round(tmp_path / "a", "thread")
    dask = _campaign_round(tmp_path / "b", "dask")
    assert (dask["verdicts"], dask["evaluations"]) == (threads["verdicts"], threads["evaluations"])
    assert len(threads["evaluations"]) == 3
    for where in ("verify_ran_on", "evaluate_ran_on"):
        assert threads[where] and dask[where]
        # the thread runner: threads of this (the flow's) process
        assert {(r["runner"], r["pid"]) for r in threads[where]} == {("thread", os.getpid())}
        # the runner's own local cluster: its worker processes, never this one
        assert {r["runner"] for r in dask[where]} == {"dask"}
        assert os.getpid() not in {r["pid"] for r in dask[where]}
        assert all(r["worker"].startswith("tcp://") for r in dask[where])
        assert len({r["pid"] for r in dask[where]}) <= 2  # run.dask_workers


@pytest.mark.slow  # a campaign's round on the cluster: above
def test_a_round_on_its_own_runs_its_fan_out_on_the_configured_cluster(prefect_api, tmp_path):
    """``spade-round`` as a deployment runs it: no campaign flow around it to pick the runner."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
        FakeOpenAIServer(script=ScriptedModel()) as server,
    ):
        pids: dict[str, int] = client.run(os.getpid)  # worker address -> pid, as Dask reports
        cfg = _config(tmp_path, server, "dask", **{"run.dask_address": cluster.scheduler_address})
        outcome = asyncio.run(round_flow(config=cfg, campaign_id="alone", round_index=0))
        ran = _results(cfg, "alone")
    assert outcome.round_index == 0 and len(ran["evaluations"]) == 3
    assert pids and os.getpid() not in pids.values()
    for where in ("verify_ran_on", "evaluate_ran_on"):
        assert ran[where]
        for r in ran[where]:
            assert r["runner"] == "dask" and r["worker"] in pids, r
            assert r["pid"] == pids[r["worker"]], (r, pids)
