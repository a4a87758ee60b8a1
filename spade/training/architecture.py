"""The shape of a decoder-only transformer, read from its ``config.json``: what the memory plan
(:mod:`spade.training.memory_plan`) counts parameters and activations from.

Llama-family decoders (Llama, Qwen2, Qwen3, Mistral): RMSNorm, grouped-query attention with
rotary embeddings (Qwen3 also normalises q and k per head), a SwiGLU MLP, embeddings optionally
tied to the output head. The config comes from the model folder (or its converted GGUF copy, or
the Hugging Face cache); the GPU presets' model ships here too (:data:`KNOWN_CONFIGS`, copied
from its public ``config.json``), so a plan needs no network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade.config import ModelConfig
from spade.errors import ConfigError

__all__ = ["KNOWN_CONFIGS", "Architecture", "architecture"]

KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    # https://huggingface.co/Qwen/Qwen3-4B-Instruct-2507/blob/main/config.json (shape fields)
    "Qwen/Qwen3-4B-Instruct-2507": {
        "model_type": "qwen3",
        "hidden_size": 2560,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 9728,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
}
_FAMILY = {"llama", "mistral", "qwen2", "qwen3"}


@dataclass(frozen=True)
class Architecture:
    """A Llama-family decoder's dimensions (see the module docstring)."""

    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Architecture:
        kind = str(config.get("model_type", ""))
        if kind not in _FAMILY:
            raise ConfigError(f"the memory plan knows {sorted(_FAMILY)} models, not {kind!r}")
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return cls(
            model_type=kind,
            hidden=hidden,
            layers=int(config["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            tied=bool(config.get("tie_word_embeddings", False)),
        )

    @property
    def qk_norm(self) -> bool:
        """Qwen3 normalises each head's q and k (RMSNorm over ``head_dim``)."""
        return self.model_type == "qwen3"

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """One decoder layer: q, k, v, o, gate, up, down and its norms."""
        h, q, kv, i = self.hidden, self.q_width, self.kv_width, self.intermediate
        norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
        return h * q + 2 * h * kv + q * h + 3 * h * i + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Every parameter once (tied embeddings counted once)."""
        head = 0 if self.tied else self.embedding_params
        return self.layers * self.layer_params + self.embedding_params + head + self.hidden

    @property
    def largest_group(self) -> int:
        """The most parameters ZeRO-3 gathers at once for one module: the embedding (or head)
        or a decoder layer's largest projection set."""
        return max(self.embedding_params, self.layer_params)


def _config_file(model: ModelConfig) -> Path | None:
    """The model's ``config.json`` on this machine, if it has one (nothing is downloaded)."""
    local = Path(model.name_or_path).expanduser()
    if (local / "config.json").is_file():
        return local / "config.json"
    try:  # a hub id: the Hugging Face cache may hold its config
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model.name_or_path, "config.json")
    except (ImportError, ValueError):  # not a hub id (a path that is not there)
        return None
    return Path(cached) if isinstance(cached, str) else None


def architecture(model: ModelConfig) -> Architecture:
    """The architecture of ``model``: its local or cached ``config.json``, else the copy in
    :data:`KNOWN_CONFIGS`; ConfigError when neither is there."""
    path = _config_file(model)
    if path is not None:
        return Architecture.from_config(json.loads(path.read_text(encoding="utf-8")))
    if model.name_or_path in KNOWN_CONFIGS:
        return Architecture.from_config(KNOWN_CONFIGS[model.name_or_path])
    raise ConfigError(
        f"model.name_or_path {model.name_or_path!r}: no config.json on this machine to plan"
        f" from (a local folder, the Hugging Face cache, or one of {sorted(KNOWN_CONFIGS)})"
    )
