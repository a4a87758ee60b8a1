"""How far the sampler's policy is from the policy being trained, on the tokens trained on.

The sampler (a llama.cpp server on quantized weights, a vLLM server in bf16, a designer several
steps stale) reports behaviour log-probs; the trainer recomputes them on its own weights. Truncated
importance sampling (:func:`spade.training.loss.importance_weights`) weighs each trained token by
``min(exp(logp_train - logp_behaviour), is_cap)``. The trainer's step metrics report the mean of
those weights (``is_weight_mean``); :func:`ratio_stats` reports the distribution of the untruncated
ratio (mean, min, max, 99th percentile) and the share of tokens the cap truncates, which say whether
the sampler can be trusted and whether ``training.is_cap`` bites. :func:`samples_ratio_stats`
scores training samples with a model first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from spade.training.samples import TrainSample, collate, micro_batches
from spade.training.scoring import token_logprobs

__all__ = ["RatioStats", "ratio_stats", "samples_ratio_stats"]


@dataclass(frozen=True)
class RatioStats:
    """Importance ratios ``exp(logp_train - logp_behaviour)`` over ``tokens`` trained tokens.

    ``truncated_share`` is the share above ``is_cap`` (0 when the cap is 0, correction off);
    ``mean_abs_gap`` is the mean ``|logp_train - logp_behaviour|`` in nats.
    """

    tokens: int
    mean: float
    min: float
    max: float
    p99: float
    truncated_share: float
    mean_abs_gap: float
    is_cap: float

    def to_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


def ratio_stats(
    train_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    is_cap: float,
) -> RatioStats:
    """Ratio statistics over the masked-in tokens.

    Args:
        train_logprobs: ``[B, T]``, the trained policy's log-probs of the sampled tokens.
        behaviour_logprobs: ``[B, T]``, the sampler's.
        mask: ``[B, T]``, nonzero on the tokens trained on (at least one).
        is_cap: ``training.is_cap`` (0: truncation off).
    """
    if train_logprobs.shape != behaviour_logprobs.shape or mask.shape != train_logprobs.shape:
        raise ValueError(
            f"shapes differ: train {tuple(train_logprobs.shape)}, behaviour"
            f" {tuple(behaviour_logprobs.shape)}, mask {tuple(mask.shape)}"
        )
    keep = mask.to(torch.bool)
    if not keep.any():
        raise ValueError("no trained tokens: nothing to compare")
    gap = train_logprobs[keep].double() - behaviour_logprobs[keep].double()  # [N]
    ratio = torch.exp(gap)  # [N]
    truncated = float((ratio > is_cap).double().mean()) if is_cap > 0 else 0.0
    return RatioStats(
        tokens=int(gap.numel()),
        mean=float(ratio.mean()),
        min=float(ratio.min()),
        max=float(ratio.max()),
        p99=float(torch.quantile(ratio, 0.99)),
        truncated_share=truncated,
        mean_abs_gap=float(gap.abs().mean()),
        is_cap=is_cap,
    )


def samples_ratio_stats(
    model: nn.Module,
    samples: Sequence[TrainSample],
    *,
    pad_id: int,
    is_cap: float,
    token_budget: int = 8192,
    temperature: float = 1.0,
) -> RatioStats:
    """:func:`ratio_stats` of ``samples`` (their behaviour log-probs) against ``model``'s
    log-probs of the same tokens at the ``temperature`` they were sampled at, scored without
    gradient in micro-batches of ``token_budget``."""
    scored = [dataclasses.replace(s, advantage=0.0) for s in samples]  # collate wants one
    train, behaviour, masks = [], [], []
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        for indices in micro_batches(scored, token_budget):
            batch = collate([scored[i] for i in indices], pad_id)
            on_device = {k: v.to(device) for k, v in batch.items()}
            logprobs, _ = token_logprobs(model, on_device, temperature=temperature)  # [B, T]
            keep = batch["loss_mask"] > 0  # [B, T]
            train.append(logprobs.cpu()[keep])
            behaviour.append(batch["behaviour_logprobs"][keep])
            masks.append(torch.ones(int(keep.sum()), dtype=torch.bool))
    return ratio_stats(torch.cat(train), torch.cat(behaviour), torch.cat(masks), is_cap)
