"""The training and publish stages hand new weights to the servers that run them: a full
checkpoint is a model folder the managed vLLM server restarts on (served under the version's
name), a LoRA adapter on S3 is staged to a local folder the server can read, an external server
loads adapters from a shared filesystem only, and the adapter a new one replaces is unloaded.
vLLM is the OpenAI stand-in behind a stand-in ``vllm`` executable (it checks adapter folders as
vLLM reads them); the policy is a tiny random-weight Llama trained on CPU."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: never the hub

import pytest

from spade.config import CampaignConfig, load_config
from spade.errors import ConfigError
from spade.inference.base import ChatRequest, Completion
from spade.inference.checkpoints import load_checkpoint
from spade.inference.pool import close_shared_backends, shared_backend, shared_vllm_server
from spade.pipeline.campaign import ensure_campaign
from spade.pipeline.context import RoundContext
from spade.pipeline.publish import publish
from spade.pipeline.record import campaign_store
from spade.pipeline.train import DesignerData, train
from spade.records import BASE, DesignAttempt, WeightsRef
from spade.testing.openai_server import FakeOpenAIServer
from tests.inference.test_vllm_server import SERVING_STUB, free_port, write_stub
from tests.training.model_folder import assert_model_folder

LORA = {"training.lora.enabled": True, "training.lora.rank": 4, "training.lora.alpha": 8}


def _config(tiny_policy: Path, root: str, **more: Any) -> CampaignConfig:
    return load_config(
        overrides={
            "name": "publish",
            "storage.root": root,
            "model.name_or_path": str(tiny_policy),
            "model.device": "cpu",
            "training.designer_lr": 1e-2,
            **more,
        }
    )


def _vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Overrides for a managed stand-in vLLM that refuses adapter folders it cannot read."""
    monkeypatch.setenv("STUB_RECORD", str(tmp_path / "launches.jsonl"))
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    stub = write_stub(tmp_path, SERVING_STUB, extra=("--check-lora-paths",))
    return {
        "inference.backend": "vllm",
        "inference.request_timeout_s": 10.0,
        "inference.vllm.executable": str(stub),
        "inference.vllm.port": free_port(),
        "inference.vllm.startup_timeout_s": 30.0,
        "inference.vllm.shutdown_timeout_s": 5.0,
        "inference.vllm.max_lora_rank": 16,
    }


def _design_data() -> DesignerData:
    """Four design attempts of one skill, two rewarded: trainable designer samples."""
    attempts = [
        DesignAttempt(
            slot=i,
            attempt=0,
            skill="logical_deduction",
            doc_id=f"d{i}",
            messages=[],
            prompt_token_ids=[10, 11, 12, 13],
            token_ids=[40 + i % 2, 41, 42],
            logprobs=[-3.0, -3.0, -3.0],
        )
        for i in range(4)
    ]
    return DesignerData(attempts, [1.0, 0.0, 1.0, 0.0])


def _launches(tmp_path: Path) -> list[list[str]]:
    lines = (tmp_path / "launches.jsonl").read_text().splitlines()
    return [json.loads(line)["argv"] for line in lines]


async def _ask(cfg: CampaignConfig, weights: WeightsRef) -> Completion:
    async with shared_backend(cfg, weights) as backend:
        (completion,) = await backend.complete([ChatRequest([{"role": "user", "content": "hi"}])])
    assert completion.ok, completion.failure
    return completion


def test_a_full_checkpoint_is_a_model_folder_the_managed_server_restarts_on(
    tiny_policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _config(tiny_policy, str(tmp_path / "store"), **_vllm(tmp_path, monkeypatch))
    ensure_campaign(campaign_store(cfg, "full"), cfg)
    outcome = train(RoundContext.open(cfg, "full", 0), _design_data(), BASE)
    weights = outcome.weights
    assert weights.kind == "full" and weights.checkpoint is not None
    folder = Path(weights.checkpoint)

    assert_model_folder(folder, load_checkpoint(str(folder)).tensors, tiny_policy)  # offline

    async def go() -> Completion:
        try:  # the managed server is stopped whatever happens
            await publish(RoundContext.open(cfg, "full", 0), weights)
            return await _ask(cfg, weights)
        finally:
            await close_shared_backends()

    completion = asyncio.run(go())
    assert completion.model == completion.text == weights.version == "r0000-designer"
    launches = _launches(tmp_path)
    assert [argv[:2] for argv in launches] == [["serve", str(tiny_policy)], ["serve", str(folder)]]
    restart = launches[1]
    assert restart[restart.index("--served-model-name") + 1] == weights.version


def test_lora_on_s3_is_staged_for_the_managed_server_and_the_old_adapter_unloaded(
    tiny_policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_bucket: Any
) -> None:
    b = s3_bucket
    cfg = _config(
        tiny_policy,
        f"s3://{b.name}/runs",
        **{"storage.storage_options": b.storage_options, **LORA, **_vllm(tmp_path, monkeypatch)},
    )
    ensure_campaign(campaign_store(cfg, "lora"), cfg)
    first = train(RoundContext.open(cfg, "lora", 0), _design_data(), BASE).weights
    second = train(RoundContext.open(cfg, "lora", 1), _design_data(), first).weights
    assert first.kind == second.kind == "lora"
    assert str(first.checkpoint).startswith("s3://") and str(second.checkpoint).startswith("s3://")

    async def go() -> tuple[list[str], list[str], Completion]:
        try:  # the managed server is stopped whatever happens
            await publish(RoundContext.open(cfg, "lora", 0), first)
            after_first = await shared_vllm_server(cfg).client.list_models()
            await publish(RoundContext.open(cfg, "lora", 1), second)
            after_second = await shared_vllm_server(cfg).client.list_models()
            return after_first, after_second, await _ask(cfg, second)
        finally:
            await close_shared_backends()

    after_first, after_second, completion = asyncio.run(go())
    assert after_first == [str(tiny_policy), "r0000-designer"]
    assert after_second == [str(tiny_policy), "r0001-designer"]  # r0000 unloaded
    assert completion.model == completion.text == "r0001-designer"
    staged = sorted((tmp_path / "cache" / "published").iterdir())
    assert [p.name.rsplit("-", 1)[0] for p in staged] == ["r0000-designer", "r0001-designer"]
    for folder in staged:
        assert sorted(p.name for p in folder.iterdir()) == [
            "adapter_config.json",
            "adapter_model.safetensors",
        ]
    assert len(_launches(tmp_path)) == 1  # adapters need no restart


def test_an_external_server_loads_adapters_from_a_shared_path_and_unloads_the_old_one(
    tiny_policy: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeOpenAIServer(check_lora_paths=True) as server:
        cfg = _config(
            tiny_policy,
            str(tmp_path / "store"),
            **{
                **LORA,
                **server.overrides(),
                "inference.max_retries": 0,
            },
        )
        ensure_campaign(campaign_store(cfg, "ext"), cfg)
        first = train(RoundContext.open(cfg, "ext", 0), _design_data(), BASE).weights
        second = train(RoundContext.open(cfg, "ext", 1), _design_data(), first).weights

        async def go() -> Completion:
            try:  # the pool is emptied whatever happens
                await publish(RoundContext.open(cfg, "ext", 0), first)
                assert server.adapters == {"r0000-designer": first.checkpoint}
                await publish(RoundContext.open(cfg, "ext", 1), second)
                await publish(
                    RoundContext.open(cfg, "ext", 1), second
                )  # a re-run publish: already loaded
                return await _ask(cfg, second)
            finally:
                await close_shared_backends()

        completion = asyncio.run(go())
        unloads = [r.body for r in server.requests if r.path == "/v1/unload_lora_adapter"]
        assert server.adapters == {"r0001-designer": second.checkpoint}
    # the re-run unloads r0000 again: the server answers 404, which is only a warning
    assert unloads == [{"lora_name": "r0000-designer"}] * 2
    assert "could not unload the previous adapter r0000-designer" in caplog.text
    assert completion.model == "r0001-designer"


def test_an_external_server_cannot_load_an_adapter_from_a_remote_store(
    tiny_policy: Path, tmp_path: Path
) -> None:
    cfg = _config(tiny_policy, str(tmp_path / "store"), **{**LORA, "inference.backend": "openai"})
    ensure_campaign(campaign_store(cfg, "remote"), cfg)
    weights = WeightsRef("r0000-designer", "s3://bucket/runs/step-00000001", "lora")
    with pytest.raises(ConfigError, match="own filesystem"):
        asyncio.run(publish(RoundContext.open(cfg, "remote", 0), weights))
