"""Build the backend a campaign config asks for (imports only the backend it needs).

Which model each backend is given:

- ``transformers``: ``model.name_or_path`` resolved in process (:func:`resolve_model`).
- ``vllm``: the same resolution, as a path ``vllm serve`` can load (:func:`vllm_model_source`):
  a local folder or ``.gguf`` file -> its absolute folder; the alias ``smollm2-135m-instruct``
  and other GGUF weights -> the converted copy (a ``save_pretrained`` folder, converted once and
  cached, as the transformers backend uses); a Hugging Face id -> passed on (vLLM fetches it).
  vLLM names the model after that path; with ``inference.served_model`` set, it serves it under
  that name instead (``--served-model-name``), which is the name requests ask for. The server
  runs on the GPUs :mod:`spade.placement` gives it (:func:`vllm_devices`).
- ``llamacpp``: the resolved model's GGUF file, served by a llama.cpp server process started
  here (:mod:`spade.inference.llamacpp`); a model without a GGUF file is a ConfigError.
- ``openai`` (a server someone else runs): only a name is sent (:func:`served_model_name`):
  ``inference.served_model``, else ``model.name_or_path`` as written (how vLLM names a model it
  was started on). The alias names weights shipped in a Python package, which no server serves
  under that name, so it needs ``inference.served_model``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from spade.config import CampaignConfig, InferenceConfig, ModelConfig
from spade.errors import ConfigError
from spade.inference.base import Backend
from spade.inference.models import SMOLLM2_ALIAS, _ensure_converted, resolve_model

_SERVED_NAME_FLAG = "--served-model-name"


def served_model_name(cfg: CampaignConfig) -> str:
    """The model name requests to an external OpenAI-compatible server carry."""
    if cfg.inference.served_model:
        return cfg.inference.served_model
    if cfg.model.name_or_path.lower() == SMOLLM2_ALIAS:
        raise ConfigError(
            f"inference.backend 'openai' with model.name_or_path {SMOLLM2_ALIAS!r}: that alias"
            " names weights shipped in a Python package, not a model a server serves; set"
            " inference.served_model to the name the server serves (GET /v1/models lists them)"
        )
    return cfg.model.name_or_path


def vllm_model_source(model: ModelConfig) -> str:
    """What ``vllm serve`` loads for ``model``: a local folder or a Hugging Face id.

    GGUF weights (the shipped SmolLM2 among them) go through the converted copy of
    :mod:`spade.inference.models`, converted here on first use (~30 s for SmolLM2-135M on CPU):
    vLLM's own GGUF loading wants a tokenizer from the Hub, which offline machines lack.

    Raises:
        ConfigError: the model cannot be found, or is GGUF on the Hub (download it first).
    """
    resolved = resolve_model(model)
    if resolved.gguf_file is None:
        return str(resolved.path)
    if not isinstance(resolved.path, Path):
        raise ConfigError(f"GGUF models must be local folders; download {resolved.name} first")
    return str(_ensure_converted(resolved))


def tokenizer_source(model: ModelConfig) -> str:
    """A folder (or Hugging Face id) with ``model``'s tokenizer: for GGUF weights the tokenizer
    and config built from the GGUF file (:func:`spade.inference.llamacpp.client_files`), not
    the whole model de-quantized as :func:`vllm_model_source` makes it."""
    if resolve_model(model).gguf_file is None:
        return vllm_model_source(model)
    from spade.inference.llamacpp import client_files

    return str(client_files(model))


def vllm_devices(cfg: CampaignConfig) -> tuple[int, ...]:
    """The node's GPUs the managed vLLM server runs on (:func:`spade.placement.placement`);
    empty when the model does not run on GPUs (``model.device`` cpu, or auto on a node without
    any), and the server then starts with the environment as it is."""
    from spade.placement import placement, visible_gpus

    gpus = visible_gpus() if cfg.model.device == "auto" else None  # nvidia-smi only for auto
    return placement(cfg, gpus).serve


def vllm_inference_config(inf: InferenceConfig) -> InferenceConfig:
    """``inf`` with ``--served-model-name`` added when ``served_model`` is set, so the managed
    server answers to the name requests ask for (and keeps it across restarts on new weights).

    Raises:
        ConfigError: ``inference.vllm.extra_args`` already name the model differently.
    """
    if not inf.served_model:
        return inf
    from spade.inference.vllm_server import configured_served_name

    args = inf.vllm.extra_args
    named = configured_served_name(args)
    if named is not None:
        if named != inf.served_model:
            raise ConfigError(
                f"inference.served_model {inf.served_model!r} and {_SERVED_NAME_FLAG} {named!r}"
                " in inference.vllm.extra_args disagree: set one of them"
            )
        return inf
    vllm = inf.vllm.model_copy(update={"extra_args": [*args, _SERVED_NAME_FLAG, inf.served_model]})
    return inf.model_copy(update={"vllm": vllm})


@asynccontextmanager
async def open_backend(cfg: CampaignConfig) -> AsyncIterator[Backend]:
    """The configured backend, started, and closed (server stopped) on exit."""
    inf = cfg.inference
    backend: Backend
    if inf.backend == "transformers":
        from spade.inference.hf import TransformersBackend

        backend = await asyncio.to_thread(TransformersBackend, cfg.model, inf)
    elif inf.backend == "openai":
        from spade.inference.openai import OpenAIBackend

        # the tokenizer, found only if a server returns no token ids, re-derives them
        tokenizer = functools.partial(tokenizer_source, cfg.model)
        backend = OpenAIBackend(inf, served_model_name(cfg), tokenizer=tokenizer)
    elif inf.backend == "llamacpp":
        from spade.inference.llamacpp import ManagedLlamaCppBackend

        llamacpp = await asyncio.to_thread(ManagedLlamaCppBackend, cfg)  # tokenizer load
        backend = await asyncio.to_thread(llamacpp.start)
    else:
        from spade.inference.vllm_server import ManagedVllmBackend

        source = await asyncio.to_thread(vllm_model_source, cfg.model)  # may convert GGUF
        devices = await asyncio.to_thread(vllm_devices, cfg)  # may ask nvidia-smi
        managed = ManagedVllmBackend(vllm_inference_config(inf), source, devices=devices)
        await asyncio.to_thread(managed.start)
        backend = managed
    try:
        yield backend
    finally:
        await backend.aclose()
