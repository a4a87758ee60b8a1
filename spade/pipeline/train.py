"""The training stages: one GRPO update of the agent, then of the designer, on one chain of
policy checkpoints (the same model plays both roles); :mod:`spade.pipeline.publish` makes the
result what the next round serves.

Checkpoints live inside the round's stage folders
(``round-<NNNN>/train_agent/checkpoint/step-<n>``), so a re-run after a crash writes the same
folder again instead of adding one; a checkpoint is only used once its own manifest is complete.
With ``training.ranks`` > 1 the update runs in that many launched processes (torchrun or
DeepSpeed's launcher, :mod:`spade.training.launcher`), each on a contiguous shard of the batch
whose advantages were computed on the whole batch here; rank 0 writes the one checkpoint, and
the ranks' logs are kept with the stage (``logs/rank-<r>.log``). A failed rank raises
:class:`~spade.errors.TrainingError` with its log's tail. The outcome is the in-process one's.

A full-weight checkpoint also holds the model's ``config.json``, generation config and tokenizer
files, so its folder is a Hugging Face model folder a vLLM server can be restarted on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from spade.config import CampaignConfig
from spade.pipeline.context import RoundContext
from spade.pipeline.record import StageRecord
from spade.pipeline.stage import Stage
from spade.records import DesignAttempt, EnvEvaluation, WeightsRef

if TYPE_CHECKING:  # the training code loads only when a stage trains
    from spade.training.job import JobResult

Role = Literal["agent", "designer"]


@dataclass(frozen=True)
class AgentData:
    """What the agent trains on: the round's evaluations (their trajectories)."""

    evaluations: list[EnvEvaluation]
    role: ClassVar[Role] = "agent"


@dataclass(frozen=True)
class DesignerData:
    """What the designer trains on: a scored round's design attempts and their rewards (the
    delayed batch, :func:`spade.pipeline.state.delayed_designer_batch`)."""

    attempts: list[DesignAttempt]
    rewards: list[float]
    role: ClassVar[Role] = "designer"


TrainData = AgentData | DesignerData


@dataclass(frozen=True)
class TrainOutcome:
    """The weights after a training stage (the parent's when there was nothing to train)."""

    weights: WeightsRef
    metrics: dict[str, float | int]
    samples: int
    skipped: str = ""  # why nothing was trained


def _samples(cfg: CampaignConfig, data: TrainData) -> tuple[list[Any], int]:
    """The role's samples, and how many replies were dropped for want of token ids."""
    from spade.training.run import agent_samples, designer_samples
    from spade.training.samples import missing_token_ids

    if isinstance(data, AgentData):
        plays = [t for e in data.evaluations for t in e.trajectories]
        return agent_samples(cfg, plays), missing_token_ids(trajectories=plays)
    samples = designer_samples(cfg, data.attempts, data.rewards)
    return samples, missing_token_ids(attempts=data.attempts)


def _update(
    cfg: CampaignConfig,
    rec: StageRecord,
    role: Role,
    parent: WeightsRef,
    samples: list[Any],
    root: str,
) -> JobResult:
    """One update from ``parent``, saved under ``root``: in this process, or with
    ``training.ranks`` > 1 by that many launched processes, each on its shard of ``samples``
    (:mod:`spade.training.launcher`), their logs kept with the stage (``logs/``), or in the
    job's local folder when a rank failed (the error names it)."""
    if cfg.training.ranks > 1:
        from spade.training.launcher import train_on_ranks

        return train_on_ranks(cfg, role, parent.checkpoint, samples, root, rec.write_bytes)
    from spade.training.run import update_from_parent

    return update_from_parent(cfg, role, parent.checkpoint, samples, root)


def train(ctx: RoundContext, data: TrainData, parent: WeightsRef) -> TrainOutcome:
    """One GRPO update of ``data.role`` from ``parent``; commits ``train_<role>``.

    ``data``: the round's evaluations (agent) or the delayed attempts and rewards (designer).
    Nothing trainable (no accepted design, no tokens, all-equal rewards) commits the stage as
    skipped and hands the parent's weights on.
    """
    cfg, round, role = ctx.config, ctx.round, data.role
    rec = StageRecord(ctx, f"train_{role}", {"parent": parent.version})
    samples, dropped = _samples(cfg, data)
    reason = ""
    if not samples:
        reason = "no trainable samples"
    elif all(s.advantage == 0 for s in samples):
        reason = "every advantage is zero (equal rewards within each group)"
    if reason:
        rec.write_json(
            "outcome.json", {"skipped": reason, "samples": len(samples), "dropped": dropped}
        )
        rec.commit("skipped", reason)
        return TrainOutcome(parent, {}, len(samples), reason)
    root = rec.cs.store.url(rec.key("checkpoint"))
    update = _update(cfg, rec, role, parent, samples, root)
    metrics, uri = update.metrics | {"dropped_samples": dropped}, update.checkpoint
    weights = WeightsRef(f"r{round:04d}-{role}", uri, update.kind)
    rec.outputs["checkpoint"] = uri
    rec.write_json(
        "outcome.json", {"metrics": metrics, "samples": len(samples)} | weights.to_dict()
    )
    rec.commit()
    return TrainOutcome(weights, metrics, len(samples))


def skip_training(ctx: RoundContext) -> None:
    """Commit both training stages as skipped (``run.train`` is off)."""
    roles: tuple[Role, ...] = ("agent", "designer")
    for role in roles:
        skip_role(ctx, role, "run.train is off")


def skip_role(ctx: RoundContext, role: Role, reason: str) -> None:
    """Commit ``train_<role>`` as skipped, with the reason (e.g. the designer in pool mode)."""
    rec = StageRecord(ctx, f"train_{role}")
    rec.write_json("outcome.json", {"skipped": reason, "samples": 0})
    rec.commit("skipped", reason)


STAGE = (
    Stage(
        "train_agent", sections=("seed", "model", "training"), entries=("train", "skip_training")
    ),
    Stage("train_designer", sections=("seed", "model", "training"), entries=("train", "skip_role")),
)
