"""The in-process transformers backend serves a LoRA checkpoint: its adapter merged into the
base weights, so completions (and their log-probs) are the merged model's."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: never the hub

import torch

from spade.config import InferenceConfig, ModelConfig, TrainingConfig, load_config
from spade.inference.base import ChatRequest, Completion, SamplingParams
from spade.inference.hf import TransformersBackend
from spade.inference.models import load_model_and_tokenizer, resolve_model
from spade.inference.pool import close_shared_backends, shared_backend
from spade.records import BASE, WeightsRef
from spade.testing.scripted_designer import write_tiny_policy
from spade.training.trainer import GRPOTrainer
from tests.training.tiny_task import LORA, task_samples

REQUEST = ChatRequest(
    [{"role": "user", "content": "Say something."}],
    params=SamplingParams(max_tokens=6, temperature=0.0, logprobs=True),
)


def _complete(backend) -> Completion:  # type: ignore[no-untyped-def]
    (completion,) = asyncio.run(backend.complete([REQUEST]))
    assert completion.ok, completion.failure
    return completion


def test_a_lora_checkpoint_is_served_merged_into_the_base_weights(tmp_path: Path) -> None:
    policy = write_tiny_policy(tmp_path / "policy")
    model_cfg = ModelConfig(name_or_path=str(policy), device="cpu")
    model, tokenizer = load_model_and_tokenizer(resolve_model(model_cfg), "float32", "cpu")
    trainer = GRPOTrainer(model, tokenizer.pad_token_id, TrainingConfig(lr=5e-2, lora=LORA))
    for _ in range(3):
        trainer.step(task_samples(trainer.model))
    uri = trainer.save(str(tmp_path / "ckpt"))
    merged = trainer.export_weights(merged=True)

    cfg = load_config(overrides={"model.name_or_path": str(policy), "model.device": "cpu"})
    reference = TransformersBackend(cfg.model, InferenceConfig())
    reference.reload(merged, "reference")
    try:  # the pool is emptied whatever happens

        async def shared(weights: WeightsRef):  # type: ignore[no-untyped-def]
            async with shared_backend(cfg, weights) as backend:
                return backend

        base = asyncio.run(shared(BASE))
        before = _complete(base)
        served = asyncio.run(shared(WeightsRef("r0000-agent", uri, "lora")))
        assert served.model_name.endswith("@r0000-agent")
        state = served.model.state_dict()
        for key, value in merged.items():
            assert torch.allclose(state[key], value, atol=1e-6, rtol=0), key
        after = _complete(served)
    finally:
        asyncio.run(close_shared_backends())
    expected = _complete(reference)
    assert after.token_ids == expected.token_ids
    assert torch.allclose(torch.tensor(after.logprobs), torch.tensor(expected.logprobs), atol=1e-5)
    assert (before.token_ids, before.logprobs) != (after.token_ids, after.logprobs)


def test_two_checkpoints_under_one_label_are_each_served(tmp_path: Path) -> None:
    """Two campaigns of one config in one process both publish ``r0000-agent``: the pool keys
    what it serves by the checkpoint too, so the second label's weights replace the first's."""
    policy = write_tiny_policy(tmp_path / "policy")
    model_cfg = ModelConfig(name_or_path=str(policy), device="cpu")
    model, tokenizer = load_model_and_tokenizer(resolve_model(model_cfg), "float32", "cpu")
    trainer = GRPOTrainer(model, tokenizer.pad_token_id, TrainingConfig(lr=5e-2, lora=LORA))
    uris, merged = [], []
    for name in ("one", "two"):
        for _ in range(2):
            trainer.step(task_samples(trainer.model))
        uris.append(trainer.save(str(tmp_path / name)))
        merged.append(trainer.export_weights(merged=True))
    cfg = load_config(overrides={"model.name_or_path": str(policy), "model.device": "cpu"})
    try:

        async def state(uri: str) -> dict[str, torch.Tensor]:
            async with shared_backend(cfg, WeightsRef("r0000-agent", uri, "lora")) as backend:
                return dict(backend.model.state_dict())  # type: ignore[attr-defined]

        for uri, expected in zip(uris, merged, strict=True):
            served = asyncio.run(state(uri))
            for key, value in expected.items():
                assert torch.allclose(served[key], value, atol=1e-6, rtol=0), key
    finally:
        asyncio.run(close_shared_backends())
    assert any(not torch.equal(merged[0][k], merged[1][k]) for k in merged[0])
