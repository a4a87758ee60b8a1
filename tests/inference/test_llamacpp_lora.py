"""Trained weights reach llama.cpp: a peft LoRA checkpoint converted to a GGUF adapter, served.

The adapter is a real peft LoRA on the shipped SmolLM2 (attention and MLP projections, alpha != r
so the scale matters, B random with a fixed seed so it changes the model). Served through the
pool as the training stage's publish does it, llama.cpp's log-probs match transformers' on the
adapted model within the quantization tolerance of tests/inference/test_llamacpp.py, and differ
clearly from the base model's (measured: mean |d| 0.087, max 0.58 against the adapted model;
mean 1.73 against the base, on 48 tokens).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: never the hub

import pytest
import torch

from spade.config import CampaignConfig, LoraConfig, load_config
from spade.errors import ConfigError
from spade.inference.adapters import adapter_tensors
from spade.inference.base import ChatRequest, Completion, SamplingParams
from spade.inference.llamacpp import client_files, gguf_path
from spade.inference.llamacpp_lora import BaseModelInfo, gguf_adapter, write_gguf_adapter
from spade.inference.models import load_model_and_tokenizer, resolve_model
from spade.inference.pool import close_shared_backends, serve_on_managed_llamacpp, shared_backend
from spade.pipeline.context import RoundContext
from spade.pipeline.publish import publish
from spade.preflight import check_model
from spade.records import BASE, WeightsRef
from spade.training.checkpoint import save_checkpoint
from spade.training.weights import adapter_config, wrap_lora
from tests.inference.test_llamacpp import MAX_TOLERANCE, MEAN_TOLERANCE, OVERRIDES

LORA = LoraConfig(
    enabled=True,
    rank=8,
    alpha=32,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
)
TEMPERATURE = 0.8  # the served log-probs are at the sampling temperature
REQUESTS = [
    ChatRequest(
        [{"role": "user", "content": text}],
        SamplingParams(max_tokens=24, temperature=TEMPERATURE, seed=i),
    )
    for i, text in enumerate(["Tell me about rivers.", "What is a prime number?"])
]


@pytest.fixture(scope="module")
def adapted(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str]:
    """(peft model with a random non-zero adapter, the LoRA checkpoint's URI)."""
    cfg = load_config(overrides=OVERRIDES)
    model, _ = load_model_and_tokenizer(resolve_model(cfg.model), "float32", "cpu")
    model = wrap_lora(model, LORA, seed=0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:  # peft starts B at zero: the adapter would change nothing
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    root = tmp_path_factory.mktemp("ckpt")
    uri = save_checkpoint(
        str(root),
        1,
        tensors=adapter_tensors(model),
        kind="lora",
        adapter_config=adapter_config(model),
    )
    return model, uri


@pytest.fixture(scope="module")
def cfg(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> CampaignConfig:
    root = tmp_path_factory.mktemp("store")
    return load_config(
        overrides={
            **OVERRIDES,
            "run.train": True,
            "training.lora": LORA.model_dump(),
            "storage.root": str(root),
        }
    )


def _served(cfg: CampaignConfig, weights: WeightsRef) -> tuple[list[Completion], Any]:
    """Completions of REQUESTS by the pool's llama.cpp server at ``weights``, and the server."""

    async def run() -> tuple[list[Completion], Any]:
        async with shared_backend(cfg, weights) as backend:
            out = await backend.complete(REQUESTS)
        managed = await serve_on_managed_llamacpp(cfg, weights)  # already there: no restart
        return out, managed.server

    return asyncio.run(run())


def _logprobs(model: Any, completion: Completion) -> torch.Tensor:
    ids = torch.tensor([completion.prompt_token_ids + completion.token_ids])  # (1, L)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # (L, V)
    start = len(completion.prompt_token_ids) - 1
    scaled = logits[start : start + len(completion.token_ids)] / TEMPERATURE  # (T, V)
    steps = torch.log_softmax(scaled, dim=-1)
    return steps.gather(-1, torch.tensor(completion.token_ids)[:, None]).squeeze(-1)  # (T,)


def _gaps(ours: list[Completion], reference: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(
        [(torch.tensor(c.logprobs) - r).abs() for c, r in zip(ours, reference, strict=True)]
    )


def test_a_published_lora_checkpoint_is_served_by_llama_cpp(cfg, adapted) -> None:
    model, uri = adapted
    weights = WeightsRef("r0001-agent", uri, "lora")
    try:  # the pool's server is stopped whatever happens
        base_out, _ = _served(cfg, BASE)
        asyncio.run(
            publish(RoundContext.open(cfg, "c", 1), weights)
        )  # the training stage's publish
        out, server = _served(cfg, weights)
        pid = server.pid
        again, _ = _served(cfg, weights)  # published already: no restart
        assert server.pid == pid
        back, _ = _served(cfg, BASE)
        pid = server.pid
        os.kill(pid, signal.SIGKILL)  # a crashed server is restarted on the next use
        while server.running:
            time.sleep(0.05)
        revived, _ = _served(cfg, BASE)
        assert server.pid not in (None, pid)
    finally:
        asyncio.run(close_shared_backends())
    assert all(c.ok and c.model == "r0001-agent" for c in out + again), out + again
    assert all(c.ok and c.model == "smollm2-135m-instruct" for c in base_out + back + revived)
    with torch.no_grad():
        adapted_ref = [_logprobs(model, c) for c in out]
        with model.disable_adapter():
            base_ref = [_logprobs(model, c) for c in out]
            back_ref = [_logprobs(model, c) for c in back]
    served = _gaps(out, adapted_ref)
    assert served.mean() <= MEAN_TOLERANCE and served.max() <= MAX_TOLERANCE, served
    as_base = _gaps(out, base_ref)  # the same tokens under the base weights: far apart
    assert as_base.mean() > 5 * MEAN_TOLERANCE, (as_base.mean(), served.mean())
    unadapted = _gaps(back, back_ref)  # back at the base, the server serves it again
    assert unadapted.mean() <= MEAN_TOLERANCE and unadapted.max() <= MAX_TOLERANCE


def test_the_gguf_adapter_has_llama_cpps_names_shapes_and_scale(cfg, adapted, tmp_path) -> None:
    import gguf

    _, uri = adapted
    base = BaseModelInfo.from_hf_config(_hf_config(cfg))
    path = gguf_adapter(Path(uri), base, cache=tmp_path)
    assert gguf_adapter(Path(uri), base, cache=tmp_path) == path  # converted once per content
    reader = gguf.GGUFReader(path)
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert fields["general.architecture"] == "llama" and fields["general.type"] == "adapter"
    assert fields["adapter.type"] == "lora" and fields["adapter.lora.alpha"] == 32.0
    shapes = {t.name: [int(d) for d in t.shape] for t in reader.tensors}  # GGUF order: (in, out)
    assert len(shapes) == 30 * 7 * 2
    assert shapes["blk.0.attn_q.weight.lora_a"] == [576, 8]
    assert shapes["blk.0.attn_q.weight.lora_b"] == [8, 576]
    assert shapes["blk.29.attn_k.weight.lora_b"] == [8, 192]
    assert shapes["blk.3.ffn_down.weight.lora_a"] == [1536, 8]
    assert shapes["blk.3.ffn_gate.weight.lora_b"] == [8, 1536]


def test_adapters_llama_cpp_cannot_serve_are_refused(cfg, adapted, tmp_path) -> None:
    model, _ = adapted
    base = BaseModelInfo.from_hf_config(_hf_config(cfg))
    tensors, config = adapter_tensors(model), adapter_config(model)
    for change in ({"use_dora": True}, {"alpha_pattern": {"q_proj": 4}}, {"bias": "all"}):
        with pytest.raises(ConfigError, match="cannot serve"):
            write_gguf_adapter(tensors, config | change, base, tmp_path / "a.gguf")
    extra = tensors | {"base_model.model.lm_head.weight": torch.zeros(2, 2)}
    with pytest.raises(ConfigError, match="cannot be served"):
        write_gguf_adapter(extra, config, base, tmp_path / "b.gguf")
    with pytest.raises(ConfigError, match="not supported"):
        BaseModelInfo.from_hf_config({"model_type": "gpt2", "num_attention_heads": 1})


def test_llamacpp_with_training_needs_lora_and_gguf_weights(cache: Path, tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"training\.lora\.enabled"):
        load_config(overrides={"inference.backend": "llamacpp"})
    load_config(overrides={"inference.backend": "llamacpp", "training.lora.enabled": True})
    load_config(overrides={"inference.backend": "llamacpp", "run.train": False})
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    hf = load_config(overrides={"model.name_or_path": str(folder), "run.train": False})
    with pytest.raises(ConfigError, match="GGUF"):
        gguf_path(hf.model)
    with pytest.raises(ConfigError, match="GGUF"):  # preflight says so before any stage
        check_model(hf.model_copy(update={"inference": cfg_llamacpp().inference}))
    assert check_model(cfg_llamacpp()).endswith(".gguf")


def cfg_llamacpp() -> CampaignConfig:
    return load_config(overrides={"inference.backend": "llamacpp", "run.train": False})


def _hf_config(cfg: CampaignConfig) -> dict[str, Any]:
    import json

    return dict(json.loads((client_files(cfg.model) / "config.json").read_text()))
