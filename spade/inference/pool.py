"""Backends shared by the stages of one process, and which weights they serve.

The stages of a round (design, hint, evaluate, held-out) all talk to one model. Opening a backend
per stage would load the in-process model once per stage, or launch one vLLM server per stage;
the pool keeps one per model and process instead and swaps weights when a newer version is
published. OpenAI-compatible clients are cheap and bound to their event loop, so each use gets a
fresh client to the shared server.

``weights`` is ``(version, checkpoint uri)``; ``checkpoint=None`` is the base model.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from spade.config import CampaignConfig
from spade.errors import ConfigError
from spade.inference.base import Backend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WeightsRef:
    """Which weights a stage uses: a version label and the checkpoint that holds them."""

    version: str = "base"
    checkpoint: str | None = None  # None: the configured base model
    kind: str = "full"  # "full" or "lora" (the checkpoint's kind)

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "checkpoint": self.checkpoint, "kind": self.kind}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WeightsRef:
        return cls(str(data["version"]), data.get("checkpoint"), str(data.get("kind", "full")))


BASE = WeightsRef()


def _pool_key(cfg: CampaignConfig) -> str:
    dump = {"model": cfg.model.model_dump(mode="json"), "inference": cfg.inference.model_dump()}
    return hashlib.sha256(json.dumps(dump, sort_keys=True, default=str).encode()).hexdigest()


class _Entry:
    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.version = BASE.version
        self.lock = threading.Lock()  # one weight swap at a time


_entries: dict[str, _Entry] = {}
_entries_lock = threading.Lock()


def _load_tensors(cfg: CampaignConfig, weights: WeightsRef) -> dict[str, Any]:
    from spade.training.checkpoint import load_checkpoint

    assert weights.checkpoint is not None
    loaded = load_checkpoint(weights.checkpoint, storage_options=cfg.storage.storage_options)
    if loaded.manifest.get("kind") != "full":
        raise ConfigError(
            "the in-process transformers backend serves full-weight checkpoints only; "
            "LoRA adapters are published to a vLLM server (inference.backend: vllm or openai)"
        )
    return loaded.tensors


def _shared_transformers(cfg: CampaignConfig, weights: WeightsRef) -> Backend:
    from spade.inference.hf import TransformersBackend

    key = _pool_key(cfg)
    with _entries_lock:
        entry = _entries.get(key)
        if entry is None:
            entry = _entries[key] = _Entry(TransformersBackend(cfg.model, cfg.inference))
    with entry.lock:
        if entry.version != weights.version:
            if weights.checkpoint is None:  # back to the base model: load it afresh
                entry.backend = TransformersBackend(cfg.model, cfg.inference)
            else:
                entry.backend.reload(_load_tensors(cfg, weights), weights.version)
            entry.version = weights.version
            log.info("in-process model now serves weights %s", weights.version)
    backend: Backend = entry.backend
    return backend


def _shared_vllm(cfg: CampaignConfig) -> Any:
    from spade.inference.vllm_server import ManagedVllmBackend

    key = _pool_key(cfg)
    with _entries_lock:
        entry = _entries.get(key)
        if entry is None:
            managed = ManagedVllmBackend(cfg.inference, cfg.model.name_or_path).start()
            entry = _entries[key] = _Entry(managed)
    return entry


@asynccontextmanager
async def shared_backend(cfg: CampaignConfig, weights: WeightsRef = BASE) -> AsyncIterator[Backend]:
    """A backend serving ``weights``, kept open for later stages of this process.

    In-process models are loaded once and reloaded on a new version; a managed vLLM server is
    launched once (LoRA versions are requested by adapter name, see ``publish``); clients to a
    server are made per use. :func:`close_shared_backends` releases everything.
    """
    inf = cfg.inference
    if inf.backend == "transformers":
        yield await asyncio.to_thread(_shared_transformers, cfg, weights)
        return
    from spade.inference.openai import OpenAIBackend

    if inf.backend == "openai":
        client_cfg, model = inf, inf.served_model or cfg.model.name_or_path
    else:
        entry = await asyncio.to_thread(_shared_vllm, cfg)
        client_cfg = inf.model_copy(update={"base_url": entry.backend.server.base_url})
        model = entry.backend.model_name
    if weights.kind == "lora" and weights.checkpoint is not None:
        model = weights.version  # the adapter's name on the server (published under it)
    client = OpenAIBackend(client_cfg, model)
    try:
        yield client
    finally:
        await client.aclose()


async def close_shared_backends() -> None:
    """Close every pooled backend (stops managed servers); the pool is empty afterwards."""
    with _entries_lock:
        entries = list(_entries.values())
        _entries.clear()
    for entry in entries:
        await entry.backend.aclose()


def shared_vllm_server(cfg: CampaignConfig) -> Any:
    """The pooled managed vLLM backend (started if needed), for publishing weights to it."""
    if cfg.inference.backend != "vllm":
        raise ConfigError("no managed vLLM server: inference.backend is not 'vllm'")
    return _shared_vllm(cfg).backend
