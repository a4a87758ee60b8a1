"""Training and publishing stages: one GRPO update of the agent, then of the designer, on one
chain of policy checkpoints (the same model plays both roles), and publishing the result.

Checkpoints live inside the round's stage folders
(``round-<NNNN>/train_agent/checkpoint/step-<n>``), so a re-run after a crash writes the same
folder again instead of adding one; a checkpoint is only used once its own manifest is complete.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from spade.config import CampaignConfig
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
    from spade.training.samples import (
        assign_advantages,
        samples_from_design_attempts,
        samples_from_trajectories,
    )

    if role == "agent":
        trajectories = [t for e in data for t in e.trajectories]
        samples = samples_from_trajectories(trajectories)
        assign_advantages(samples, scale_by_std=cfg.training.advantage_std)
    else:
        attempts, rewards = data
        samples = samples_from_design_attempts(attempts, rewards)
        assign_advantages(samples, "centred")
    return list(samples)


def _trainer(cfg: CampaignConfig, role: Role, parent: WeightsRef) -> Any:
    from spade.inference.models import load_model_and_tokenizer, resolve_model
    from spade.training import checkpoint as ckpt
    from spade.training.trainer import GRPOTrainer

    resolved = resolve_model(cfg.model)
    model, tokenizer = load_model_and_tokenizer(resolved, cfg.model.dtype, cfg.model.device)
    ref = None
    if cfg.training.kl_coef > 0 and not cfg.training.lora.enabled:
        ref = load_model_and_tokenizer(resolved, cfg.model.dtype, cfg.model.device)[0]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    trainer = GRPOTrainer(model, pad, cfg.training, role=role, ref_model=ref)
    if parent.checkpoint is None:
        return trainer
    loaded = ckpt.load_checkpoint(parent.checkpoint, storage_options=cfg.storage.storage_options)
    trainer.load_weights(loaded)
    state = dict(loaded.trainer_state or {})
    if state.get("role") == role:  # the optimizer state of this role's previous update
        state["optimizer"] = loaded.optimizer_state
        trainer.load_state_dict(state)
    else:  # the other role wrote it: its weights, a fresh optimizer, the step count goes on
        trainer.global_step = loaded.step
    return trainer


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
    trainer = _trainer(cfg, role, parent)
    metrics = trainer.step(samples).to_dict()
    root = rec.cs.store.url(rec.key("checkpoint"))
    uri = trainer.save(root, storage_options=cfg.storage.storage_options, parent=parent.checkpoint)
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

    In-process models pick the version up when they next serve (see ``spade.inference.pool``);
    a managed vLLM server loads a LoRA adapter at runtime under the version's name, or restarts
    on a full checkpoint exported as a model folder.
    """
    rec = StageRecord(cfg, campaign_id, round, "publish", {"weights": weights.version})
    note = ""
    if weights.checkpoint is not None and cfg.inference.backend == "vllm":
        await _publish_to_vllm(cfg, weights)
    elif weights.checkpoint is not None and cfg.inference.backend == "openai":
        note = await _publish_to_server(cfg, weights)
    rec.write_json("weights.json", weights.to_dict())
    rec.commit(note=note)
    return weights


async def _publish_to_vllm(cfg: CampaignConfig, weights: WeightsRef) -> None:
    from spade.inference.pool import shared_vllm_server
    from spade.training.publish import publish_lora_adapter

    server = shared_vllm_server(cfg)
    assert weights.checkpoint is not None
    if weights.kind == "lora":
        await publish_lora_adapter(server.client, weights.checkpoint, weights.version)
    else:
        await server.publish_checkpoint(weights.checkpoint)


async def _publish_to_server(cfg: CampaignConfig, weights: WeightsRef) -> str:
    """An external OpenAI-compatible server: LoRA adapters load at runtime (the folder must be
    readable by the server); full weights need the server restarted on them by its owner."""
    from spade.inference.openai import OpenAIBackend
    from spade.training.publish import publish_lora_adapter

    assert weights.checkpoint is not None
    if weights.kind != "lora":
        log.warning("external server: restart it on %s to serve these weights", weights.checkpoint)
        return f"full weights: restart the external server on {weights.checkpoint}"
    client = OpenAIBackend(cfg.inference, cfg.inference.served_model or cfg.model.name_or_path)
    try:  # the client is closed whatever the server answers
        await publish_lora_adapter(client, weights.checkpoint, weights.version)
    finally:
        await client.aclose()
    return ""


def skip_training(cfg: CampaignConfig, campaign_id: str, round: int) -> None:
    """Commit both training stages as skipped (``run.train`` is off)."""
    for stage in ("train_agent", "train_designer"):
        rec = StageRecord(cfg, campaign_id, round, stage)
        rec.commit("skipped", "run.train is off")
