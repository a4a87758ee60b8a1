"""A campaign stops the model server its rounds started: a managed vLLM server runs in a session
of its own, so one left running outlives the campaign's process (``spade run``, a deployment's
flow run) and holds its port, and the next run's server cannot start there. The server is the
stand-in ``vllm`` of tests/inference/test_vllm_server.py (the scripted OpenAI server, with a
child left in its process group as vLLM's engine is)."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest

from flows.campaign import campaign_flow
from spade.config import CampaignConfig, load_config
from spade.processes import free_port
from spade.testing.scripted_designer import write_corpus
from tests.inference.test_vllm_server import SERVING_STUB, pid_gone, write_stub


def _config(tmp_path: Path, policy: Path, *, fail: bool = False) -> CampaignConfig:
    vllm = write_stub(tmp_path, SERVING_STUB)
    return load_config(
        overrides={
            "name": "servers",
            "storage.root": str(tmp_path / "store"),
            "model.name_or_path": str(policy),
            "inference.backend": "vllm",
            "inference.request_timeout_s": 10,
            "inference.vllm.executable": str(vllm),
            "inference.vllm.port": free_port(),
            "inference.vllm.enable_lora": False,
            "inference.vllm.startup_timeout_s": 60,
            "inference.vllm.shutdown_timeout_s": 5,
            "corpus.path": str(write_corpus(tmp_path / "corpus.jsonl")),
            "designer.envs_per_round": 1,
            "designer.attempts_per_slot": 1,
            "designer.repair_turns": 0,
            # a pool that is not there: the round fails after the design stage asked the server
            "run.min_envs": 1 if fail else 0,
            "run.env_pool": str(tmp_path / "no-pool") if fail else None,
            "run.train": False,
        }
    )


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("fail", [False, True], ids=["completed", "failed"])
def test_a_campaign_stops_the_managed_server_its_rounds_started(
    prefect_api, tiny_policy, tmp_path, monkeypatch, fail
):
    record = tmp_path / "launches.jsonl"
    monkeypatch.setenv("STUB_RECORD", str(record))
    cfg = _config(tmp_path, tiny_policy, fail=fail)
    state = asyncio.run(campaign_flow(config=cfg, campaign_id="c", rounds=1, return_state=True))
    assert state.is_failed() == fail
    (launch,) = [json.loads(line) for line in record.read_text().splitlines()]  # it was started
    assert not _listening(cfg.inference.vllm.port)  # and is gone: its port is free again
    assert pid_gone(launch["worker"])  # with the engine-like child of its group
