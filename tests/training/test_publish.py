"""New weights reach the inference backends: a trained LoRA adapter through vLLM's runtime
adapter endpoint (the stand-in implements its shapes), and full weights in process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from spade.config import InferenceConfig, TrainingConfig
from spade.errors import InferenceError
from spade.inference.base import ChatRequest
from spade.inference.openai import OpenAIBackend
from spade.testing.openai_server import FakeOpenAIServer
from spade.training.publish import (
    adapter_name,
    publish_full_checkpoint,
    publish_lora_adapter,
    publish_state_dict,
)
from spade.training.trainer import GRPOTrainer
from tests.training.tiny_task import LORA, PAD, task_samples, tiny_llama


def _trained_lora_checkpoint(root: Path) -> Path:
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(lr=2e-2, lora=LORA))
    trainer.step(task_samples(trainer.model))
    uri = trainer.save(str(root))
    return Path(uri.removeprefix("file://"))


def test_trained_lora_adapter_is_loaded_by_the_runtime_endpoint_and_served(tmp_path):
    folder = _trained_lora_checkpoint(tmp_path / "ckpt")
    assert (folder / "adapter_model.safetensors").is_file()
    assert json.loads((folder / "adapter_config.json").read_text())["r"] == LORA["rank"]

    async def go(server: FakeOpenAIServer) -> tuple[str, str]:
        backend = OpenAIBackend(
            InferenceConfig(backend="openai", base_url=server.url, max_retries=0), server.model
        )
        try:
            name = await publish_lora_adapter(backend, folder, adapter_name("agent", 1))
            (completion,) = await backend.complete(
                [ChatRequest([{"role": "user", "content": "hi"}])]
            )
            return name, completion.model
        finally:
            await backend.aclose()

    with FakeOpenAIServer(script=lambda r: r["model"]) as server:
        name, served_by = asyncio.run(go(server))
        loads = [r for r in server.requests if r.path == "/v1/load_lora_adapter"]
    assert name == "agent-lora-v1" and served_by == name
    assert loads[0].body == {"lora_name": "agent-lora-v1", "lora_path": str(folder)}
    assert server.adapters == {"agent-lora-v1": str(folder)}


def test_full_weights_publish_in_process(tmp_path):
    from tests.inference.test_hf_backend import _backend, _tiny_model, _tiny_tokenizer

    tok = _tiny_tokenizer()
    _tiny_model(tok, seed=0).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    backend = _backend(tmp_path / "m")
    trainer = GRPOTrainer(_tiny_model(tok, seed=0), tok.pad_token_id, TrainingConfig(lr=1e-2))
    samples = task_samples(trainer.model)
    trainer.step(samples)
    before = backend.model_name
    after = asyncio.run(publish_state_dict(backend, trainer.export_weights(), "step-1"))
    assert after != before and after.endswith("@step-1")
    for key, value in trainer.export_weights().items():
        assert backend.model.state_dict()[key].equal(value), key


def test_a_backend_without_the_capability_says_so():
    backend = OpenAIBackend(InferenceConfig(backend="openai"), "m")
    with pytest.raises(InferenceError, match="cannot switch"):
        asyncio.run(publish_full_checkpoint(backend, "/x"))
    with pytest.raises(InferenceError, match="state dict"):
        asyncio.run(publish_state_dict(backend, {}, "v1"))
