"""The publish stage: the round's trained weights become what the next round serves (an
in-process model swaps them in, a managed vLLM or llama.cpp server is restarted or given the
adapter, an external server loads the adapter or is told to restart); then, with
``checkpoints.keep_last``, the checkpoints no round needs any more are deleted
(:mod:`spade.pipeline.retention`)."""

from __future__ import annotations

import asyncio
import logging

from spade.errors import ConfigError
from spade.pipeline.context import RoundContext
from spade.pipeline.record import StageRecord
from spade.pipeline.retention import RETENTION, retain_checkpoints, retention_note
from spade.pipeline.stage import Stage
from spade.records import WeightsRef

log = logging.getLogger(__name__)


async def publish(ctx: RoundContext, weights: WeightsRef) -> WeightsRef:
    """Make ``weights`` the round's published weights; the next round serves them.

    - in-process transformers: the pool swaps the version in when it next serves (a LoRA
      checkpoint merged into the base weights), see :mod:`spade.inference.pool`;
    - a managed vLLM server (``inference.backend: vllm``, on this machine): restarted on a full
      checkpoint's folder, served under the version's name, or given a LoRA adapter at runtime
      under the version's name (the previous adapter unloaded). A checkpoint on a remote store
      is copied (verified) to ``$SPADE_CACHE/published`` first: vLLM reads only its own disk;
    - a managed llama.cpp server (``inference.backend: llamacpp``): restarted with the LoRA
      adapter converted to GGUF (cached by content), completions named after the version;
    - an external server (``openai``): see :func:`_publish_to_server`.

    Then, with ``checkpoints.keep_last``, older checkpoints no round needs are deleted
    (:mod:`spade.pipeline.retention`), and the stage is committed again with what went
    (``retention.json``, and the note).
    """
    cfg = ctx.config
    rec = StageRecord(ctx, "publish", {"weights": weights.version})
    note = ""
    if weights.checkpoint is not None and cfg.inference.backend == "vllm":
        from spade.inference.pool import held, serve_on_managed_vllm

        async with held(cfg, weights):  # never switched under a stage still playing
            await serve_on_managed_vllm(cfg, weights)
    elif weights.checkpoint is not None and cfg.inference.backend == "llamacpp":
        from spade.inference.pool import held, serve_on_managed_llamacpp

        async with held(cfg, weights):
            await serve_on_managed_llamacpp(cfg, weights)
    elif weights.checkpoint is not None and cfg.inference.backend == "openai":
        note = await _publish_to_server(ctx, weights)
    rec.write_json("weights.json", weights.to_dict())
    rec.commit(note=note)
    # Only once the new weights are durably published may older ones go (checkpoints.keep_last);
    # in a thread: deleting a checkpoint takes a while, and the event loop runs another round
    # beside this one with run.overlap
    retention = await asyncio.to_thread(retain_checkpoints, ctx, weights)
    if retention is not None:  # what went: with the stage's outputs, and its note
        rec.write_json(RETENTION, retention)
        rec.commit(note="; ".join(n for n in (note, retention_note(retention)) if n))
    return weights


async def _publish_to_server(ctx: RoundContext, weights: WeightsRef) -> str:
    """An external OpenAI-compatible server, possibly on another machine.

    LoRA: the adapter loads at runtime from the checkpoint folder's path on this machine, so the
    store must be a filesystem the server sees at the same path (a local or network-mounted
    ``storage.root``); a checkpoint on a remote store (``s3://``) is a ConfigError, as vLLM
    reads adapters from its own filesystem only (use ``inference.backend: vllm``, whose server
    on this machine gets a local copy). The adapter the previous round published (with
    ``run.overlap``: the one before it, which no round serves any more) is unloaded once the
    new one is loaded. Full weights: the server's owner restarts it on them (noted).
    """
    from spade.inference.checkpoints import local_checkpoint_path
    from spade.inference.openai import OpenAIBackend
    from spade.pipeline.state import published_weights

    cfg, round = ctx.config, ctx.round
    assert weights.checkpoint is not None
    if weights.kind != "lora":
        log.warning("external server: restart it on %s to serve these weights", weights.checkpoint)
        return f"full weights: restart the external server on {weights.checkpoint}"
    folder = local_checkpoint_path(weights.checkpoint, cfg.storage.storage_options)
    if folder is None:
        raise ConfigError(
            f"cannot publish LoRA adapter {weights.checkpoint} to the external server at"
            f" {cfg.inference.base_url}: vLLM loads adapters from its own filesystem, not from"
            " a remote store. Put storage.root on a filesystem the server mounts at the same"
            " path, or use inference.backend 'vllm' (a managed server here gets a local copy)"
        )
    # the newest adapter no round serves any more: with run.overlap the next round still
    # plays on the one before this round's
    stale = round - 1 - cfg.run.overlap
    previous = published_weights(ctx.store, stale) if stale >= 0 else None
    old = previous.version if previous and previous.kind == "lora" and previous.checkpoint else None
    client = OpenAIBackend(cfg.inference.model_copy(update={"served_model": None}), "admin")
    try:  # the client is closed whatever the server answers
        await client.swap_lora_adapter(weights.version, str(folder), previous=old)
    finally:
        await client.aclose()
    return ""


STAGE = Stage(
    "publish", sections=("model", "training", "checkpoints.keep_last"), entries=("publish",)
)
