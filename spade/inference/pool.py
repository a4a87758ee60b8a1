"""Backends shared by the stages of one process, and which weights they serve.

The stages of a round (design, hint, evaluate, held-out) all talk to one model. Opening a backend
per stage would load the in-process model once per stage, or launch one vLLM server per stage;
the pool keeps one per model and process instead and swaps weights when a newer version is
published. OpenAI-compatible clients are cheap and bound to their event loop, so each use gets a
fresh client to the shared server.

``weights`` is ``(version, checkpoint uri, kind)``; ``checkpoint=None`` is the base model. Each
backend is brought to the weights a stage asks for before it is handed out:

- in-process transformers: the checkpoint's weights are swapped in; a LoRA checkpoint's adapter
  is merged into the configured base weights first (the weights it was trained on);
- a managed vLLM server: a full checkpoint by restarting the server on the checkpoint folder,
  served under the version's name; a LoRA adapter by loading it at runtime under the version's
  name (the adapter it replaces is unloaded). vLLM reads its own filesystem: a checkpoint on a
  local store is handed over as its folder; one on a remote store (``s3://``) - and any adapter
  of a containerised server, which sees only its mounts - is first copied, verified, to
  ``$SPADE_CACHE/published/<version>-<hash>`` (:func:`serving_folder`);
- a managed llama.cpp server: restarted with the LoRA checkpoint's adapter converted to GGUF
  (cached by content, :mod:`spade.inference.llamacpp_lora`), or without adapters for the base;
  completions record the version's name. It serves GGUF weights only: a full checkpoint is a
  ConfigError (the config requires LoRA training with it). A server that died is restarted;
- an external server: requests name the adapter (published by ``spade.pipeline.train``).

Requests name the version (adapter or served model name), so completions record which weights
produced them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from spade.config import CampaignConfig
from spade.errors import ConfigError
from spade.inference.base import Backend
from spade.records import BASE, WeightsRef

log = logging.getLogger(__name__)


def _pool_key(cfg: CampaignConfig) -> str:
    dump = {"model": cfg.model.model_dump(mode="json"), "inference": cfg.inference.model_dump()}
    return hashlib.sha256(json.dumps(dump, sort_keys=True, default=str).encode()).hexdigest()


class _Entry:
    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.version = BASE.version
        self.checkpoint: str | None = None  # what is served: the base model
        self.lock = threading.Lock()  # one weight swap at a time
        # who uses the backend now, and with which weights (see hold)
        self.turn = threading.Condition()
        self.users = 0
        self.held: tuple[str, str | None] | None = None

    def hold(self, weights: WeightsRef) -> None:
        """Wait until no stage uses the backend with other weights, then count this one as
        using it with ``weights`` until :meth:`release`. Stages asking for the same weights
        share the backend; a stage asking for others waits for them to finish, so the weights
        are never switched under a stage that is playing (overlapped rounds serve two
        versions; sequential rounds ask for one at a time and never wait)."""
        want = (weights.version, weights.checkpoint)
        with self.turn:
            if self.users and self.held != want:
                log.info("weights %s wait for the stages served %s", want[0], self.held)
            while self.users and self.held != want:
                self.turn.wait()
            self.held = want
            self.users += 1

    def release(self) -> None:
        with self.turn:
            self.users -= 1
            if self.users == 0:
                self.held = None
            self.turn.notify_all()

    def serves(self, weights: WeightsRef) -> bool:
        """Whether these weights are what the entry serves: the same version label *and* the
        same checkpoint (two campaigns of one config in one process both publish
        ``r0000-agent``; a label alone would serve one the other's adapter)."""
        return (self.version, self.checkpoint) == (weights.version, weights.checkpoint)

    def now_serves(self, weights: WeightsRef) -> None:
        self.version, self.checkpoint = weights.version, weights.checkpoint


_entries: dict[str, _Entry] = {}
_entries_lock = threading.Lock()


def _load_tensors(cfg: CampaignConfig, weights: WeightsRef) -> dict[str, Any]:
    """Full weights of a checkpoint, under the base model's own names."""
    from spade.inference.checkpoints import load_checkpoint

    assert weights.checkpoint is not None
    loaded = load_checkpoint(weights.checkpoint, storage_options=cfg.storage.storage_options)
    if loaded.manifest.get("kind") == "lora":
        return _merged_lora(cfg, loaded)
    return loaded.tensors


def _merged_lora(cfg: CampaignConfig, loaded: Any) -> dict[str, Any]:
    """A LoRA checkpoint's adapter merged into a fresh CPU copy of the configured base model.

    The adapter was trained on the base weights, not on what the backend serves now (an earlier
    version, merged), so the base is loaded again; the merge is ``W + scale * B @ A`` per
    adapted layer (:func:`spade.inference.adapters.full_tensors`).
    """
    import torch

    from spade.errors import CheckpointError
    from spade.inference.adapters import (
        ADAPTER,
        add_adapter,
        full_tensors,
        load_adapter_tensors,
        peft,
    )
    from spade.inference.models import HF_LOADING, load_model_and_tokenizer, resolve_model

    if loaded.adapter_config is None:
        raise CheckpointError(f"{loaded.info.uri}: a LoRA checkpoint without adapter_config.json")
    base, _ = load_model_and_tokenizer(resolve_model(cfg.model), cfg.model.dtype, "cpu")
    peft_config = peft().PeftConfig.from_peft_type(**loaded.adapter_config)
    # random adapter init, overwritten just below; peft's lazy imports under the loading lock
    with torch.random.fork_rng(devices=[]), HF_LOADING:
        model = add_adapter(base, peft_config, adapter_name=ADAPTER)
    load_adapter_tensors(model, loaded.tensors)
    return full_tensors(model)


def _in_process_entry(cfg: CampaignConfig) -> _Entry:
    from spade.inference.hf import TransformersBackend

    key = _pool_key(cfg)
    with _entries_lock:
        entry = _entries.get(key)
        if entry is None:
            entry = _entries[key] = _Entry(TransformersBackend(cfg.model, cfg.inference))
    return entry


def _shared_transformers(cfg: CampaignConfig, weights: WeightsRef) -> Backend:
    from spade.inference.hf import TransformersBackend

    entry = _in_process_entry(cfg)
    with entry.lock:
        if not entry.serves(weights):
            if weights.checkpoint is None:  # back to the base model: load it afresh
                entry.backend = TransformersBackend(cfg.model, cfg.inference)
            else:
                entry.backend.reload(_load_tensors(cfg, weights), weights.version)
            entry.now_serves(weights)
            log.info("in-process model now serves weights %s", weights.version)
    backend: Backend = entry.backend
    return backend


def _shared_vllm(cfg: CampaignConfig) -> Any:
    from spade.inference.factory import vllm_devices, vllm_inference_config, vllm_model_source
    from spade.inference.vllm_server import ManagedVllmBackend

    key = _pool_key(cfg)
    with _entries_lock:
        entry = _entries.get(key)
        if entry is None:
            # the model as vLLM can load it (the shipped GGUF alias: its converted folder)
            source = vllm_model_source(cfg.model)
            managed = ManagedVllmBackend(
                vllm_inference_config(cfg.inference), source, devices=vllm_devices(cfg)
            ).start()
            entry = _entries[key] = _Entry(managed)
    return entry


def serving_folder(cfg: CampaignConfig, weights: WeightsRef, *, copy: bool = False) -> str:
    """A folder on this machine holding ``weights``' checkpoint for a server here to load: the
    checkpoint folder itself on a local store (unless ``copy``), else a verified copy of its
    serving files under ``$SPADE_CACHE/published/<version>-<hash of the uri>``."""
    from spade.inference.checkpoints import local_checkpoint_path, stage_checkpoint

    assert weights.checkpoint is not None
    options = cfg.storage.storage_options
    local = local_checkpoint_path(weights.checkpoint, options)
    if local is not None and not copy:
        return str(local)
    dest = staged_folder(weights)
    return str(stage_checkpoint(weights.checkpoint, dest, storage_options=options))


def staged_folder(weights: WeightsRef) -> Path:
    """Where :func:`serving_folder` copies ``weights``' checkpoint on this machine (whether or
    not it did): ``$SPADE_CACHE/published/<version>-<hash of the uri>``; checkpoint retention
    deletes it with the checkpoint."""
    from spade.inference.vllm_server import staging_root

    assert weights.checkpoint is not None
    digest = hashlib.sha256(weights.checkpoint.encode()).hexdigest()[:12]
    return staging_root() / f"{re.sub(r'[^\w.-]', '_', weights.version)}-{digest}"


def _serve_on_vllm(cfg: CampaignConfig, entry: _Entry, weights: WeightsRef) -> str:
    """Bring the managed server to ``weights`` (blocking: a restart takes minutes); returns the
    model name requests for them use."""
    managed = entry.backend
    with entry.lock:
        if not entry.serves(weights):
            if weights.checkpoint is not None and weights.kind != "lora":
                managed.serve_checkpoint(serving_folder(cfg, weights), weights.version)
            else:
                if managed.server.model != managed.base_model:  # after a full checkpoint
                    managed.serve_checkpoint(managed.base_model)
                managed.client.model_name = managed.server_model_name
            if weights.checkpoint is not None and weights.kind == "lora":
                copy = cfg.inference.vllm.container is not None  # it sees only its mounts
                folder = serving_folder(cfg, weights, copy=copy)
                asyncio.run(managed.publish_adapter(weights.version, folder))  # worker thread
            entry.now_serves(weights)
            log.info("managed vLLM server now serves weights %s", weights.version)
        return str(managed.model_name)


async def serve_on_managed_vllm(cfg: CampaignConfig, weights: WeightsRef) -> str:
    """Make the pooled managed vLLM server (started if needed) serve ``weights``; returns the
    model name requests for them use (the version's name unless ``weights`` is the base)."""
    entry = await asyncio.to_thread(_shared_vllm, cfg)
    return await asyncio.to_thread(_serve_on_vllm, cfg, entry, weights)


def _shared_llamacpp(cfg: CampaignConfig) -> _Entry:
    from spade.inference.llamacpp import ManagedLlamaCppBackend

    key = _pool_key(cfg)
    with _entries_lock:
        entry = _entries.get(key)
        if entry is None:
            entry = _entries[key] = _Entry(ManagedLlamaCppBackend(cfg).start())
    return entry


def llamacpp_adapter(cfg: CampaignConfig, weights: WeightsRef, files: Path) -> Path:
    """The GGUF LoRA adapter of ``weights`` (a LoRA checkpoint) for the model whose Hugging Face
    config is in ``files`` (converted once per checkpoint content, then cached)."""
    from spade.inference.llamacpp_lora import BaseModelInfo, gguf_adapter

    if weights.kind != "lora":
        raise ConfigError(
            f"weights {weights.version} are a full checkpoint: a llama.cpp server serves GGUF"
            " weights plus LoRA adapters only (train with training.lora.enabled)"
        )
    base = BaseModelInfo.from_hf_config(json.loads((files / "config.json").read_text()))
    return gguf_adapter(serving_folder(cfg, weights), base)


def _serve_on_llamacpp(cfg: CampaignConfig, entry: _Entry, weights: WeightsRef) -> None:
    """Restart the managed llama.cpp server with ``weights``' adapter (or none) unless it
    already serves them; a server that died is restarted too."""
    managed = entry.backend
    with entry.lock:
        if entry.serves(weights) and managed.server.running:
            return
        if weights.checkpoint is None:
            managed.serve([], managed.base_name)
        else:
            managed.serve([llamacpp_adapter(cfg, weights, managed.files)], weights.version)
        entry.now_serves(weights)
        log.info("managed llama.cpp server now serves weights %s", weights.version)


async def serve_on_managed_llamacpp(cfg: CampaignConfig, weights: WeightsRef) -> Any:
    """Make the pooled managed llama.cpp server (started if needed) serve ``weights``; returns
    the :class:`~spade.inference.llamacpp.ManagedLlamaCppBackend`."""
    entry = await asyncio.to_thread(_shared_llamacpp, cfg)
    await asyncio.to_thread(_serve_on_llamacpp, cfg, entry, weights)
    return entry.backend


@asynccontextmanager
async def shared_backend(cfg: CampaignConfig, weights: WeightsRef = BASE) -> AsyncIterator[Backend]:
    """A backend serving ``weights``, kept open for later stages of this process.

    In-process models are loaded once and reloaded on a new version; a managed vLLM or llama.cpp
    server is launched once and brought to the version (see the module docstring); clients to a
    server are made per use. :func:`close_shared_backends` releases everything.
    """
    inf = cfg.inference
    if inf.backend == "openai":  # requests name the adapter: any number of versions at once
        async with _openai_client(cfg, weights) as client:
            yield client
        return
    entry = await asyncio.to_thread(_pooled_entry, cfg)
    await asyncio.to_thread(entry.hold, weights)
    try:  # held until the stage is done with the backend, whatever it does
        if inf.backend == "transformers":
            yield await asyncio.to_thread(_shared_transformers, cfg, weights)
        elif inf.backend == "llamacpp":
            llamacpp = (await serve_on_managed_llamacpp(cfg, weights)).client()
            try:  # the client is closed whatever the stage does; the server stays for later
                yield llamacpp
            finally:
                await llamacpp.aclose()
        else:
            model = await serve_on_managed_vllm(cfg, weights)
            url = entry.backend.server.base_url
            async with _openai_client(cfg, weights, model, url) as client:
                yield client
    finally:
        entry.release()


@asynccontextmanager
async def held(cfg: CampaignConfig, weights: WeightsRef) -> AsyncIterator[None]:
    """Hold the pooled backend on ``weights`` (see :meth:`_Entry.hold`) while the block brings
    it to them: what the publish stage does, so a switch never comes under a playing stage."""
    if cfg.inference.backend == "openai":  # an external server: no switch to wait for
        yield
        return
    entry = await asyncio.to_thread(_pooled_entry, cfg)
    await asyncio.to_thread(entry.hold, weights)
    try:
        yield
    finally:
        entry.release()


def _pooled_entry(cfg: CampaignConfig) -> _Entry:
    """The process's pooled backend entry of ``cfg``'s model (started if needed)."""
    backend = cfg.inference.backend
    if backend == "transformers":
        return _in_process_entry(cfg)
    return _shared_llamacpp(cfg) if backend == "llamacpp" else _shared_vllm(cfg)


@asynccontextmanager
async def _openai_client(
    cfg: CampaignConfig, weights: WeightsRef, model: str | None = None, url: str | None = None
) -> AsyncIterator[Backend]:
    """A client of an OpenAI-compatible server (the configured one, or a managed vLLM's at
    ``url``) asking for ``model`` (default: the adapter of ``weights``, else the served
    model)."""
    from spade.inference.factory import served_model_name
    from spade.inference.openai import OpenAIBackend

    inf = cfg.inference if url is None else cfg.inference.model_copy(update={"base_url": url})
    if model is None:
        model = served_model_name(cfg)
        if weights.kind == "lora" and weights.checkpoint is not None:
            model = weights.version  # the adapter's name on the server (published under it)
    # the name is resolved: a configured served_model must not override a version's name
    client = OpenAIBackend(inf.model_copy(update={"served_model": None}), model)
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
