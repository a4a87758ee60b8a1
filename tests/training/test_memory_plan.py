"""The memory plan's counts: a decoder layer's saved activations per token equal what autograd
keeps in a real layer, in each precision and for both families; model states and buffers."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from spade.config import TrainingConfig
from spade.training.architecture import KNOWN_CONFIGS, Architecture
from spade.training.memory_plan import activation_bytes_per_token, model_states

SHAPE = {"vocab_size": 300, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 1,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24}  # fmt: skip
FAMILIES = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}


def _saved_per_token(family: str, precision: str, tokens: int = 12) -> float:
    """Bytes autograd keeps for one real decoder layer's backward, per token: every saved
    tensor's storage once, the layer's own weights (and autocast's bf16 copies of them) left
    out, the layer's input counted (a checkpointed layer keeps it too)."""
    config_cls, model_cls = FAMILIES[family]
    model = model_cls(config_cls(**SHAPE))
    layer = model.model.layers[0]
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    layer.to(dtype)
    hidden = torch.randn(1, tokens, SHAPE["hidden_size"], dtype=dtype, requires_grad=True)
    positions = torch.arange(tokens)[None]
    rotary = tuple(t.to(dtype) for t in model.model.rotary_emb(hidden, positions))
    weights = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    seen: dict[int, int] = {}

    shapes = {tuple(p.shape) for p in layer.parameters()}
    casts: set[int] = set()  # autocast's bf16 copies of the weights: counted apart (2 B/param)

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if tuple(t.shape) in shapes or tuple(reversed(t.shape)) in shapes:
            casts.add(storage.data_ptr())
        seen.setdefault(storage.data_ptr(), storage.nbytes())
        return t

    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "autocast")
    with autocast, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(hidden, position_embeddings=rotary, position_ids=positions, attention_mask=None)
    kept = sum(n for ptr, n in seen.items() if ptr not in weights and ptr not in casts)
    return kept / tokens


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("precision", ["autocast", "bf16", "fp32"])
def test_a_layers_activations_are_what_autograd_keeps(family, precision, monkeypatch):
    # torch's own linear: a DeepSpeed ZeRO-3 engine made earlier in this process replaces
    # F.linear for good with its memory-efficient one, which under autocast keeps one bf16
    # copy of a layer input fewer (the plan counts the larger, transformers' own)
    monkeypatch.setattr(torch.nn.functional, "linear", torch._C._nn.linear)
    arch = Architecture.from_config({"model_type": family, **SHAPE})
    assert activation_bytes_per_token(arch, precision) == _saved_per_token(family, precision)


def test_the_presets_model_is_known_offline_and_counted():
    arch = Architecture.from_config(KNOWN_CONFIGS["Qwen/Qwen3-4B-Instruct-2507"])
    assert 4.0e9 < arch.params < 4.05e9  # Qwen3-4B: 4.02 B parameters, embeddings tied
    assert arch.largest_group == 151936 * 2560


def test_zero3_states_divide_by_the_ranks_and_deepspeeds_estimate_is_used_for_its_bf16():
    arch = Architecture.from_config(KNOWN_CONFIGS["Qwen/Qwen3-4B-Instruct-2507"])
    cfg = TrainingConfig(engine="deepspeed", ranks=4, deepspeed={"zero_stage": 3, "bf16": True})
    (states, bucket, prefetch) = model_states(arch, cfg, "bf16", 4)
    assert prefetch.bytes == 50_000_000 * 2
    assert states.bytes == 4 * arch.largest_group + 18 * arch.params // 4
    assert "DeepSpeed" in states.how and bucket.bytes == 500_000_000 * 2
    plain = TrainingConfig(engine="deepspeed", ranks=4, deepspeed={"zero_stage": 3})
    fp32 = model_states(arch, plain, "autocast", 4)
    assert fp32[0].bytes == 4 * arch.largest_group + 20 * arch.params // 4
