"""Getting new weights to the inference backend after a training step.

- in-process transformers: swap the state dict in (``TransformersBackend.reload``);
- an OpenAI-compatible vLLM server with LoRA: load the adapter folder through vLLM's runtime
  adapter API under a versioned name, and send later requests to that name;
- a managed vLLM server with full fine-tuning: restart it on the new checkpoint folder.

Every path returns the model name that later rollouts record (``Completion.model``), so a
trajectory says which weights produced it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spade.errors import InferenceError
from spade.inference.base import Backend


def adapter_name(base: str, version: int | str) -> str:
    """The versioned name a LoRA adapter is served under, e.g. ``agent-lora-v12``."""
    return f"{base}-lora-v{version}"


async def publish_state_dict(backend: Backend, state: Mapping[str, Any], version: str) -> str:
    """In-process backend: load ``state`` (full weights) and return the new model name."""
    reload = getattr(backend, "reload", None)
    if reload is None:
        raise InferenceError(f"{type(backend).__name__} cannot load a state dict in process")
    return str(await asyncio.to_thread(reload, state, version))


async def publish_lora_adapter(backend: Backend, adapter_dir: str | Path, name: str) -> str:
    """vLLM with runtime LoRA: load the adapter folder under ``name`` and make it the default
    model of later requests. The folder must be readable by the server (shared storage)."""
    client: Any = getattr(backend, "client", backend)  # ManagedVllmBackend wraps an OpenAIBackend
    load = getattr(client, "load_lora_adapter", None)
    if load is None:
        raise InferenceError(f"{type(backend).__name__} has no runtime adapter API")
    await load(name, str(adapter_dir))
    client.model_name = name
    return name


async def publish_full_checkpoint(backend: Backend, checkpoint_dir: str | Path) -> str:
    """Full fine-tuning on vLLM: restart the managed server on the new weights."""
    restart = getattr(backend, "publish_checkpoint", None)
    if restart is None:
        raise InferenceError(
            f"{type(backend).__name__} cannot switch to a new full checkpoint; restart the "
            "server on it (or use a managed vLLM backend)"
        )
    await restart(checkpoint_dir)
    return backend.model_name
