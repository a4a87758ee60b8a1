"""An update's metrics (:class:`StepMetrics`) and a batch's, combined over its updates."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

__all__ = ["StepMetrics", "combine"]


@dataclass(frozen=True)
class StepMetrics:
    """One optimizer step (``updates == 1``) or a batch of ``updates`` steps, over all ranks.

    ``loss`` is the step's loss (as one big batch); ``kl``, ``clip_fraction``, ``entropy``,
    ``ratio_mean`` and ``is_weight_mean`` are means over the trained tokens; ``tokens`` counts the
    tokens run through the model (padding excluded), ``trained_tokens`` those the loss is taken
    on; ``tokens_per_s`` is ``tokens`` over the wall time (the pi_old/reference pass included
    in a batch's figure); ``grad_norm`` is before clipping; ``lr`` is the rate the update used.
    ``mismatch_kl`` and ``mismatch_outside`` say how far the sampler's log-probs are from the
    trainer's before the update (:func:`spade.training.loss.mismatch_metrics`), token means.
    ``optimizer_steps``: 1, or 0 for an update without a gradient, which skips its optimizer
    step (every advantage 0 and no KL term: stepping would only replay AdamW's momentum).
    For a batch of several updates: ``step`` is the last one's, ``loss`` and ``grad_norm`` are
    means over the updates, counts are sums, token means are over all their trained tokens.
    """

    step: int
    loss: float
    kl: float
    clip_fraction: float
    grad_norm: float
    entropy: float
    ratio_mean: float
    is_weight_mean: float
    tokens: int
    trained_tokens: int
    samples: int
    micro_batches: int
    tokens_per_s: float
    seconds: float
    lr: float
    updates: int = 1
    mismatch_kl: float = 0.0
    mismatch_outside: float = 0.0
    optimizer_steps: int = 1

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def combine(updates: list[StepMetrics], seconds: float) -> StepMetrics:
    """A batch's metrics from its updates' (see :class:`StepMetrics`), the batch taking
    ``seconds``."""
    tokens = sum(u.tokens for u in updates)
    rate = tokens / seconds if seconds > 0 else 0.0
    if len(updates) == 1:
        return replace(updates[0], seconds=seconds, tokens_per_s=rate)
    trained = sum(u.trained_tokens for u in updates)

    def token_mean(key: str) -> float:
        return sum(getattr(u, key) * u.trained_tokens for u in updates) / max(trained, 1)

    return StepMetrics(
        step=updates[-1].step,
        loss=sum(u.loss for u in updates) / len(updates),
        kl=token_mean("kl"),
        clip_fraction=token_mean("clip_fraction"),
        grad_norm=sum(u.grad_norm for u in updates) / len(updates),
        entropy=token_mean("entropy"),
        ratio_mean=token_mean("ratio_mean"),
        is_weight_mean=token_mean("is_weight_mean"),
        tokens=tokens,
        trained_tokens=trained,
        samples=sum(u.samples for u in updates),
        micro_batches=sum(u.micro_batches for u in updates),
        tokens_per_s=rate,
        seconds=seconds,
        lr=updates[-1].lr,
        updates=len(updates),
        mismatch_kl=token_mean("mismatch_kl"),
        mismatch_outside=token_mean("mismatch_outside"),
        optimizer_steps=sum(u.optimizer_steps for u in updates),
    )
