"""A peft LoRA adapter folder as a llama.cpp GGUF adapter, the way trained weights reach llama.cpp.

What llama.cpp's own ``convert_lora_to_gguf.py`` writes, for the architectures below, with the
``gguf`` package's :class:`gguf.GGUFWriter`:

- metadata: ``general.architecture`` (the base model's GGUF architecture: llama.cpp refuses an
  adapter of another one), ``general.type`` = ``adapter``, ``adapter.type`` = ``lora``,
  ``adapter.lora.alpha``;
- per adapted weight ``W`` (``out x in``) with GGUF name ``N`` (e.g. ``blk.3.attn_q.weight``,
  from :func:`gguf.get_tensor_name_map`): ``N.lora_a`` = peft's ``lora_A`` (``r x in``) and
  ``N.lora_b`` = ``lora_B`` (``out x r``), float32, in torch's row-major layout (GGUF lists
  dimensions the other way round, so llama.cpp sees ``a: [in, r]``, ``b: [r, out]``);
- the ``llama`` architecture stores q/k projection rows permuted for its rotary layout
  (``convert_hf_to_gguf.LlamaModel.permute``): the same row permutation is applied to the q/k
  ``lora_B`` (``A`` acts on the input side and is unchanged). Qwen2/Qwen3 store them as is.

llama.cpp scales an adapter by ``alpha / r`` (``r`` read from each ``lora_a``); peft by
``lora_alpha / r`` (``lora_alpha / sqrt(r)`` with rsLoRA), so ``alpha`` is written as
``scaling x r``. Adapters llama.cpp cannot express are refused with a ConfigError: per-module
alphas, rsLoRA with per-module ranks, DoRA, LoRA biases, ``fan_in_fan_out`` and any tensor that
is not a ``lora_A``/``lora_B`` weight (embeddings, ``modules_to_save``).

:func:`gguf_adapter` converts once per content: the file is cached under
``$SPADE_CACHE/llamacpp/adapters/<sha256 of the adapter's weights, its config and the base>.gguf``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade.errors import ConfigError

ADAPTER_WEIGHTS = "adapter_model.safetensors"  # = spade.inference.checkpoints.WEIGHTS_FILES["lora"]
ADAPTER_CONFIG = "adapter_config.json"
_PERMUTED_QK = {"llama": True, "qwen2": False, "qwen3": False}  # HF model_type -> permute?
_LORA_KEY = re.compile(r"^base_model\.model\.(?P<base>.+)\.lora_(?P<ab>[AB])\.weight$")


@dataclass(frozen=True)
class BaseModelInfo:
    """What the conversion needs to know about the base model (from its Hugging Face config)."""

    model_type: str  # "llama", "qwen2", ... (also the GGUF architecture name for these)
    n_layers: int
    n_heads: int
    n_kv_heads: int

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> BaseModelInfo:
        model_type = str(config.get("model_type", ""))
        if model_type not in _PERMUTED_QK:
            raise ConfigError(
                f"LoRA adapters for llama.cpp: model type {model_type!r} is not supported"
                f" (supported: {', '.join(sorted(_PERMUTED_QK))})"
            )
        heads = int(config["num_attention_heads"])
        return cls(
            model_type=model_type,
            n_layers=int(config["num_hidden_layers"]),
            n_heads=heads,
            n_kv_heads=int(config.get("num_key_value_heads") or heads),
        )


def gguf_adapter(folder: str | Path, base: BaseModelInfo, cache: str | Path | None = None) -> Path:
    """The GGUF adapter of the peft adapter folder ``folder`` (converted once, then cached)."""
    folder = Path(folder)
    weights, config = (
        (folder / ADAPTER_WEIGHTS).read_bytes(),
        (folder / ADAPTER_CONFIG).read_bytes(),
    )
    digest = hashlib.sha256()
    for part in (weights, config, json.dumps(base.__dict__, sort_keys=True).encode()):
        digest.update(hashlib.sha256(part).digest())
    root = Path(cache) if cache is not None else adapter_cache_root()
    target = root / f"{digest.hexdigest()[:24]}.gguf"
    if target.is_file():
        return target
    from safetensors.torch import load

    root.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=".gguf", dir=root)
    os.close(fd)
    tmp = Path(name)
    try:  # only a finished file is renamed into place
        write_gguf_adapter(load(weights), json.loads(config), base, tmp)
        tmp.chmod(0o644)
        tmp.rename(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def adapter_cache_root() -> Path:
    """``$SPADE_CACHE/llamacpp/adapters`` (default ``~/.cache/spade/llamacpp/adapters``)."""
    cache = Path(os.environ.get("SPADE_CACHE") or "~/.cache/spade").expanduser()
    return cache / "llamacpp" / "adapters"


def write_gguf_adapter(
    tensors: Mapping[str, Any],
    adapter_config: Mapping[str, Any],
    base: BaseModelInfo,
    out: str | Path,
) -> None:
    """Write peft adapter ``tensors`` (saved names) as a GGUF LoRA adapter file ``out``."""
    import gguf

    arch = {name: kind for kind, name in gguf.MODEL_ARCH_NAMES.items()}[base.model_type]
    names = gguf.get_tensor_name_map(arch, base.n_layers)
    writer = gguf.GGUFWriter(str(out), base.model_type)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, _gguf_alpha(adapter_config, tensors))
    for hf_name, (lora_a, lora_b) in sorted(_pairs(tensors).items()):
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight",))
        if gguf_name is None:
            raise ConfigError(f"LoRA adapter on {hf_name}: llama.cpp has no tensor of that name")
        lora_b = _permuted(lora_b, hf_name, base)
        writer.add_tensor(f"{gguf_name}.lora_a", lora_a.float().contiguous().numpy())
        writer.add_tensor(f"{gguf_name}.lora_b", lora_b.float().contiguous().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _pairs(tensors: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{base weight name: (lora_A (r, in), lora_B (out, r))}``; anything else is refused."""
    halves: dict[str, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        match = _LORA_KEY.match(key)
        if match is None:
            raise ConfigError(f"LoRA adapter tensor {key!r} cannot be served by llama.cpp")
        halves.setdefault(f"{match['base']}.weight", {})[match["ab"]] = tensor
    incomplete = sorted(name for name, ab in halves.items() if set(ab) != {"A", "B"})
    if incomplete:
        raise ConfigError(f"LoRA adapter without both halves for {incomplete[:3]}")
    return {name: (ab["A"], ab["B"]) for name, ab in halves.items()}


def _gguf_alpha(config: Mapping[str, Any], tensors: Mapping[str, Any]) -> float:
    """``adapter.lora.alpha`` such that llama.cpp's ``alpha / r`` is peft's scaling."""
    refused = [
        key
        for key in ("use_dora", "fan_in_fan_out", "alpha_pattern")
        if config.get(key) not in (None, False, {})
    ]
    if config.get("bias", "none") != "none":
        refused.append("bias")
    ranks = {int(t.shape[0]) for k, t in tensors.items() if k.endswith(".lora_A.weight")}
    if config.get("use_rslora") and len(ranks) > 1:
        refused.append("use_rslora with per-module ranks")
    if refused:
        raise ConfigError(f"LoRA adapter options llama.cpp cannot serve: {', '.join(refused)}")
    alpha, r = float(config["lora_alpha"]), int(config["r"])
    if config.get("use_rslora"):
        (rank,) = ranks or {r}
        return alpha / math.sqrt(rank) * rank
    return alpha  # peft: alpha / r_module, llama.cpp: alpha / r of each lora_a, the same


def _permuted(lora_b: Any, hf_name: str, base: BaseModelInfo) -> Any:
    """``lora_B`` (out, r) with the rows of a llama q/k projection in GGUF's rotary order."""
    if not _PERMUTED_QK[base.model_type]:
        return lora_b
    if hf_name.endswith("q_proj.weight"):
        heads = base.n_heads
    elif hf_name.endswith("k_proj.weight"):
        heads = base.n_kv_heads
    else:
        return lora_b
    rows = lora_b.shape[0]
    return (
        lora_b.reshape(heads, 2, rows // heads // 2, *lora_b.shape[1:])
        .swapaxes(1, 2)
        .reshape(lora_b.shape)
    )
