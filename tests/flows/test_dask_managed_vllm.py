"""A round on a local Dask cluster plays against the managed vLLM server of the flow's process
(the 8-GPU presets: ``inference.backend: vllm`` with ``run.task_runner: dask``): the evaluate
tasks, in the workers' processes, reach that server instead of each launching one of their own
on its port (which failed every play: "port ... is already in use"). The server is the stand-in
``vllm`` of tests/inference/test_vllm_server.py (the scripted OpenAI server answering with the
name of the model a request named)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from flows.campaign import campaign_flow
from spade.config import load_config
from spade.pipeline.record import campaign_store, read_jsonl
from spade.processes import free_port
from spade.testing.scripted_designer import write_corpus
from tests.inference.test_vllm_server import SERVING_STUB, write_stub

pytestmark = pytest.mark.sandbox
REPO = Path(__file__).resolve().parents[2]


def test_dask_workers_play_against_the_flows_managed_vllm_server(
    prefect_api, tiny_policy, tmp_path, monkeypatch
):
    record = tmp_path / "launches.jsonl"
    monkeypatch.setenv("STUB_RECORD", str(record))
    cfg = load_config(
        overrides={
            "name": "dask-vllm",
            "storage.root": str(tmp_path / "store"),
            "model.name_or_path": str(tiny_policy),
            "inference.backend": "vllm",
            "inference.request_timeout_s": 10,
            "inference.vllm.executable": str(write_stub(tmp_path, SERVING_STUB)),
            "inference.vllm.port": free_port(),
            "inference.vllm.enable_lora": False,
            "inference.vllm.startup_timeout_s": 60,
            "inference.vllm.shutdown_timeout_s": 5,
            "corpus.path": str(write_corpus(tmp_path / "corpus.jsonl")),
            "designer.envs_per_round": 1,
            "designer.attempts_per_slot": 1,
            "designer.repair_turns": 0,
            # the stand-in writes no design: the round plays a pool game
            "run.min_envs": 1,
            "run.env_pool": str(REPO / "spade" / "envs" / "examples" / "number_hunt.py"),
            "evaluation.unhinted_plays": 2,
            "evaluation.hinted_plays": 1,
            "evaluation.max_turns": 2,
            "run.train": False,
            "run.task_runner": "dask",
            "run.dask_workers": 2,
        }
    )
    asyncio.run(campaign_flow(config=cfg, campaign_id="d", rounds=1))

    cs = campaign_store(cfg, "d")
    (row,) = read_jsonl(cs, cs.layout.stage_key(0, "evaluate", "evaluations.jsonl"))
    prefix = f"envs/{row['env_id']}"
    summary = cs.store.read_json(cs.layout.stage_key(0, "evaluate", f"{prefix}/summary.json"))
    assert summary["ran_on"]["runner"] == "dask" and summary["ran_on"]["pid"] != os.getpid()
    plays = read_jsonl(cs, cs.layout.stage_key(0, "evaluate", f"{prefix}/trajectories.jsonl"))
    assert len(plays) == 3 and all(p["status"] != "inference_failed" for p in plays)
    # every turn answered by the one server, under the name it serves the base weights by
    assert {p["model"] for p in plays} == {str(tiny_policy)}
    assert all(t["text"] == str(tiny_policy) for p in plays for t in p["turns"])
    assert len(record.read_text().splitlines()) == 1  # launched once, by the flow's process
