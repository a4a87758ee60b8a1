"""Training and publishing stages: one GRPO update of the agent, then of the designer, on one
chain of policy checkpoints (the same model plays both roles), and publishing the result.

Checkpoints live inside the round's stage folders
(``round-<NNNN>/train_agent/checkpoint/step-<n>``), so a re-run after a crash writes the same
folder again instead of adding one; a checkpoint is only used once its own manifest is complete.
A full-weight checkpoint also holds the model's ``config.json``, generation config and tokenizer
files, so its folder is a Hugging Face model folder a vLLM server can be restarted on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from spade.config import CampaignConfig
from spade.errors import ConfigError
from spade.inference.pool import WeightsRef
from spade.pipeline.record import StageRecord

log = logging.getLogger(__name__)
Role = Literal["agent", "designer"]


@dataclass(frozen=True)
class TrainOutcome:
    """The weights after a training stage (the parent's when there was nothing to train)."""

    weights: WeightsRef
    metrics: dict[str, float | int]
    samples: int
    skipped: str = ""  # why nothing was trained


def _samples(cfg: CampaignConfig, role: Role, data: Any) -> list[Any]:
    from spade.training.run import agent_samples, designer_samples

    if role == "agent":
        return agent_samples(cfg, [t for e in data for t in e.trajectories])
    attempts, rewards = data
    return designer_samples(cfg, attempts, rewards)


def _trainer(
    cfg: CampaignConfig, role: Role, parent: WeightsRef
) -> tuple[Any, dict[str, bytes] | None]:
    """The trainer at ``parent``'s weights, and (full fine-tuning) the model files its
    checkpoints carry to be loadable model folders."""
    from spade.training import checkpoint as ckpt
    from spade.training.run import build_trainer

    trainer, files = build_trainer(cfg, role)
    if parent.checkpoint is None:
        return trainer, files
    loaded = ckpt.load_checkpoint(parent.checkpoint, storage_options=cfg.storage.storage_options)
    trainer.load_weights(loaded)
    state = dict(loaded.trainer_state or {})
    if state.get("role") == role:  # the optimizer state of this role's previous update
        state["optimizer"] = loaded.optimizer_state
        trainer.load_state_dict(state)
    else:  # the other role wrote it: its weights, a fresh optimizer, the step count goes on
        trainer.global_step = loaded.step
    return trainer, files


def train(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
    role: Role,
    data: Any,
    parent: WeightsRef,
) -> TrainOutcome:
    """One GRPO update of ``role`` from ``parent``; commits ``train_<role>``.

    ``data``: the round's evaluations (agent) or ``(attempts, rewards)`` (designer).
    Nothing trainable (no accepted design, no tokens, all-equal rewards) commits the stage as
    skipped and hands the parent's weights on.
    """
    stage = f"train_{role}"
    rec = StageRecord(cfg, campaign_id, round, stage, {"parent": parent.version})
    samples = _samples(cfg, role, data)
    reason = ""
    if not samples:
        reason = "no trainable samples"
    elif all(s.advantage == 0 for s in samples):
        reason = "every advantage is zero (equal rewards within each group)"
    if reason:
        rec.write_json("outcome.json", {"skipped": reason, "samples": len(samples)})
        rec.commit("skipped", reason)
        return TrainOutcome(parent, {}, len(samples), reason)
    trainer, files = _trainer(cfg, role, parent)
    metrics = trainer.step(samples).to_dict()
    root = rec.cs.store.url(rec.key("checkpoint"))
    uri = trainer.save(
        root,
        storage_options=cfg.storage.storage_options,
        parent=parent.checkpoint,
        model_files=files,
    )
    kind = trainer.kind
    weights = WeightsRef(f"r{round:04d}-{role}", uri, kind)
    rec.outputs["checkpoint"] = uri
    rec.write_json(
        "outcome.json", {"metrics": metrics, "samples": len(samples)} | weights.to_dict()
    )
    rec.commit()
    return TrainOutcome(weights, metrics, len(samples))


async def publish(
    cfg: CampaignConfig, campaign_id: str, round: int, weights: WeightsRef
) -> WeightsRef:
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
    """
    rec = StageRecord(cfg, campaign_id, round, "publish", {"weights": weights.version})
    note = ""
    if weights.checkpoint is not None and cfg.inference.backend == "vllm":
        from spade.inference.pool import serve_on_managed_vllm

        await serve_on_managed_vllm(cfg, weights)
    elif weights.checkpoint is not None and cfg.inference.backend == "llamacpp":
        from spade.inference.pool import serve_on_managed_llamacpp

        await serve_on_managed_llamacpp(cfg, weights)
    elif weights.checkpoint is not None and cfg.inference.backend == "openai":
        note = await _publish_to_server(cfg, campaign_id, round, weights)
    rec.write_json("weights.json", weights.to_dict())
    rec.commit(note=note)
    return weights


async def _publish_to_server(
    cfg: CampaignConfig, campaign_id: str, round: int, weights: WeightsRef
) -> str:
    """An external OpenAI-compatible server, possibly on another machine.

    LoRA: the adapter loads at runtime from the checkpoint folder's path on this machine, so the
    store must be a filesystem the server sees at the same path (a local or network-mounted
    ``storage.root``); a checkpoint on a remote store (``s3://``) is a ConfigError, as vLLM
    reads adapters from its own filesystem only (use ``inference.backend: vllm``, whose server
    on this machine gets a local copy). The adapter the previous round published is unloaded
    once the new one is loaded. Full weights: the server's owner restarts it on them (noted).
    """
    from spade.inference.openai import OpenAIBackend
    from spade.pipeline.state import published_weights
    from spade.training.checkpoint import local_checkpoint_path

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
    previous = published_weights(cfg, campaign_id, round - 1) if round > 0 else None
    old = previous.version if previous and previous.kind == "lora" and previous.checkpoint else None
    client = OpenAIBackend(cfg.inference.model_copy(update={"served_model": None}), "admin")
    try:  # the client is closed whatever the server answers
        await client.swap_lora_adapter(weights.version, str(folder), previous=old)
    finally:
        await client.aclose()
    return ""


def skip_training(cfg: CampaignConfig, campaign_id: str, round: int) -> None:
    """Commit both training stages as skipped (``run.train`` is off)."""
    roles: tuple[Role, ...] = ("agent", "designer")
    for role in roles:
        skip_role(cfg, campaign_id, round, role, "run.train is off")


def skip_role(cfg: CampaignConfig, campaign_id: str, round: int, role: Role, reason: str) -> None:
    """Commit ``train_<role>`` as skipped, with the reason (e.g. the designer in pool mode)."""
    rec = StageRecord(cfg, campaign_id, round, f"train_{role}")
    rec.write_json("outcome.json", {"skipped": reason, "samples": 0})
    rec.commit("skipped", reason)
