"""LoRA adapters under peft's names: adapter tensors in and out of a model, and merged weights.

What serving a LoRA checkpoint in process needs (:mod:`spade.inference.pool` merges its adapter
into the base weights) and what the trainer uses to export and restore adapters
(:mod:`spade.training.weights`). Full weights carry the model's own ``state_dict`` names; adapter
tensors peft's saved names (``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight``).
peft is imported by the functions that need it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import torch
from torch import nn

from spade.inference.models import HF_LOADING

ADAPTER = "default"  # peft's name of the one adapter the trainer makes


def peft() -> ModuleType:
    """The ``peft`` package (its LoRA tuner loaded), imported under :data:`HF_LOADING`: peft's
    first import pulls in transformers modules and is not thread-safe."""
    with HF_LOADING:
        import peft as module
        import peft.tuners.lora  # LoraLayer, reached as module.tuners.lora

    return module


def add_adapter(model: nn.Module, config: Any, **kwargs: Any) -> nn.Module:
    """peft's ``get_peft_model(model, config, **kwargs)``, without the deprecation warning
    peft's own check of ``model.is_gradient_checkpointing`` raises in transformers 5 (one per
    wrap, printed into every training stage's log; it is not ours to act on). Call under
    :data:`HF_LOADING`, as peft's lazy imports need: the warning filter is process-wide while
    it is set, so that lock also keeps two wraps from restoring each other's filters."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        return peft().get_peft_model(model, config, **kwargs)


def is_peft(model: nn.Module) -> bool:
    """Whether ``model`` carries peft adapters."""
    return isinstance(model, peft().PeftModel)


def adapter_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter tensors under peft's saved names, detached CPU copies."""
    state = peft().get_peft_model_state_dict(model, adapter_name=ADAPTER)
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def full_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every weight under the base model's names, LoRA merged in; detached CPU copies."""
    if not is_peft(model):
        return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    lora_layer = peft().tuners.lora.LoraLayer
    base = model.get_base_model()  # type: ignore[operator]
    out: dict[str, torch.Tensor] = {}
    for key, value in base.state_dict().items():
        if ".lora_" in key:  # lora_A / lora_B / lora_embedding_* / lora_magnitude_*
            continue
        out[key.replace(".base_layer.", ".")] = value.detach().to("cpu", copy=True)
    for name, module in base.named_modules():
        layer: Any = module  # peft's layer classes carry their own (untyped) attributes
        if not isinstance(module, lora_layer) or ADAPTER not in module.lora_A:
            continue
        if layer.lora_variant.get(ADAPTER) is not None or layer.lora_bias.get(ADAPTER):
            raise NotImplementedError(f"merging a LoRA variant or bias ({name}) is not supported")
        key = f"{name}.weight"
        delta = layer.get_delta_weight(ADAPTER).detach().to("cpu")
        out[key] = (out[key] + delta.to(out[key].dtype)).contiguous()
    return out


def load_adapter_tensors(model: nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    """Copy adapter tensors (peft's saved names) into a LoRA model; every adapter must fit."""
    if not is_peft(model):
        raise ValueError("adapter weights need a LoRA model (training.lora.enabled)")
    expected = set(adapter_tensors(model))
    if set(tensors) != expected:
        missing, extra = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise ValueError(
            f"adapter weights do not fit: missing {missing[:5]}, unexpected {extra[:5]}"
        )
    result = peft().set_peft_model_state_dict(model, dict(tensors), adapter_name=ADAPTER)
    unexpected = [k for k in getattr(result, "unexpected_keys", []) if ".lora_" in k]
    if unexpected:
        raise ValueError(f"adapter weights do not fit: unexpected {unexpected[:5]}")
