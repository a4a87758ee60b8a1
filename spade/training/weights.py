"""Weights in and out of a trained model: LoRA wrapping, export for publishing, checkpoint loads.

Two kinds of weights leave the trainer (names match ``spade.inference.checkpoints``' kinds):

- ``"full"``: the model's own ``state_dict`` names (``model.layers.0.self_attn.q_proj.weight``,
  ...), what ``TransformersBackend.reload`` and ``save_pretrained`` folders use. For a LoRA model
  the adapters are *merged* into copies of the base weights (the trained model is left as is:
  no in-place merge/unmerge, whose rounding would drift the base weights).
- ``"lora"``: only the adapter tensors, under peft's saved names
  (``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight``), with the
  ``adapter_config.json`` peft writes: together an adapter folder that
  ``peft.PeftModel.from_pretrained`` and vLLM's LoRA loading read as is.

Adapter tensors in and out of a model and the merge into full weights are
:mod:`spade.inference.adapters`' (serving a LoRA checkpoint in process needs them too).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from spade.config import LoraConfig
from spade.inference.adapters import ADAPTER, add_adapter, is_peft, peft
from spade.inference.models import HF_LOADING

__all__ = ["adapter_config", "hf_model_files", "load_full_tensors", "wrap_lora"]


def wrap_lora(model: nn.Module, lora: LoraConfig, *, seed: int) -> nn.Module:
    """``model`` with LoRA adapters (peft ``get_peft_model``); only the adapters train.

    The adapters are injected into ``model`` in place (peft's way). Their random initial values
    come from ``seed`` without touching the global RNG. A model that already is a peft model is
    returned as is.
    """
    if is_peft(model):
        return model
    peft_config = peft().LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    devices = [model.device] if getattr(model, "device", torch.device("cpu")).type == "cuda" else []
    with torch.random.fork_rng(devices=devices), HF_LOADING:
        torch.manual_seed(seed)
        try:
            wrapped = add_adapter(model, peft_config)
        except ValueError as exc:  # e.g. none of target_modules exist in this model
            raise ValueError(f"cannot add LoRA adapters: {exc}") from exc
    return wrapped


def adapter_config(model: nn.Module) -> dict[str, Any]:
    """The ``adapter_config.json`` content peft itself writes for ``model``'s adapter."""
    config: Any = model.peft_config[ADAPTER]  # type: ignore[index]
    with tempfile.TemporaryDirectory() as tmp:
        config.save_pretrained(tmp)
        return dict(json.loads((Path(tmp) / "adapter_config.json").read_text()))


def load_full_tensors(model: nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    """Copy full weights (``model``'s own names) into a non-LoRA model; every name must fit."""
    from spade.inference.models import load_state_into

    if is_peft(model):
        raise ValueError("full weights go into a model without adapters (this one has LoRA)")
    load_state_into(model, tensors)  # checks names and shapes first: never a partial load


def hf_model_files(model: Any, tokenizer: Any = None) -> dict[str, bytes]:
    """``config.json``, ``generation_config.json`` (if the model has one) and the tokenizer's
    files of a transformers causal LM, as ``save_pretrained`` writes them: with them and the
    weights a full checkpoint folder loads as a Hugging Face model (transformers, vLLM).

    The config names the model's class (``architectures``, which vLLM needs) and keeps the dtype
    the model was loaded in (the trainer may hold fp32 master weights; servers cast on load).
    """
    import copy

    config = copy.deepcopy(model.config)
    config.architectures = [type(model).__name__]
    if getattr(config, "dtype", None) is None:
        config.dtype = model.dtype
    with tempfile.TemporaryDirectory() as tmp:
        config.save_pretrained(tmp)
        generation = getattr(model, "generation_config", None)
        if generation is not None:
            generation.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        return {f.name: f.read_bytes() for f in sorted(Path(tmp).iterdir()) if f.is_file()}
