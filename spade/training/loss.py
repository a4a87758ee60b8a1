"""The GRPO policy loss: clipped surrogate, KL penalty, importance correction
(docs/architecture.md §2.9).

Shapes: ``B`` sequences (plays or design attempts) of ``T`` token positions (padded). Every
per-token tensor is ``(B, T)``; ``mask`` is ``(B, T)`` and is nonzero exactly on the tokens the
loss is taken on (the agent's own tokens: prompt, observations and padding are masked out).
Advantages are one per sequence, ``(B,)``, and broadcast over its tokens.

Masked positions may hold anything, even ``inf`` or ``nan`` (padding log-probs): they are
replaced by neutral values *before* any arithmetic, so they change neither the loss nor any
gradient, and the gradient at those positions is exactly 0.

Choices by name, from registries: the KL estimator (:data:`KL_ESTIMATORS`) and the aggregation
of token losses into the batch loss (:data:`AGGREGATIONS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from spade.registry import lookup

__all__ = [
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "MISMATCH_BAND",
    "Aggregation",
    "KLEstimator",
    "LossOutput",
    "aggregate",
    "get_aggregation",
    "get_kl_estimator",
    "importance_weights",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_penalty",
    "mismatch_metrics",
    "policy_loss",
    "sequence_mean",
    "token_mean",
    "token_sum",
]

# ----------------------------------------------------------------------------------------- KL

KLEstimator = Callable[[Tensor, Tensor], Tensor]
"""``fn(logprobs[B, T], ref_logprobs[B, T]) -> kl[B, T]``."""


def kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman's k1: ``lp - ref`` (unbiased for KL(pi || ref), high variance, can be < 0).

    Shapes: ``(B, T), (B, T) -> (B, T)``.
    """
    return logprobs - ref_logprobs


def kl_k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman's k2: ``0.5 * (ref - lp) ** 2`` (biased, low variance, >= 0).

    Shapes: ``(B, T), (B, T) -> (B, T)``.
    """
    d = ref_logprobs - logprobs
    return 0.5 * d * d


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman's k3: ``exp(ref - lp) - (ref - lp) - 1`` (unbiased, low variance, >= 0).

    Shapes: ``(B, T), (B, T) -> (B, T)``.
    """
    d = ref_logprobs - logprobs
    return torch.expm1(d) - d


KL_ESTIMATORS: dict[str, KLEstimator] = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}
"""Per-token estimators of KL(pi || ref) from samples of pi, by name (Schulman, 2020)."""


def get_kl_estimator(name: str) -> KLEstimator:
    """The KL estimator called ``name``; ValueError naming the valid ones otherwise."""
    return lookup(KL_ESTIMATORS, name, "KL estimator")


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token KL(pi || ref) estimate of the sampled tokens.

    Args:
        logprobs: shape ``(B, T)``, log-probs of the sampled tokens under the current policy.
        ref_logprobs: shape ``(B, T)``, under the reference policy.
        estimator: ``"k1"``, ``"k2"`` or ``"k3"`` (see :data:`KL_ESTIMATORS`).

    Returns:
        shape ``(B, T)``; unmasked (the caller masks and aggregates).
    """
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)} and ref_logprobs {tuple(ref_logprobs.shape)}"
            " differ in shape"
        )
    return get_kl_estimator(estimator)(logprobs, ref_logprobs)


# ------------------------------------------------------------------------ importance sampling


def importance_weights(old_logprobs: Tensor, behaviour_logprobs: Tensor, cap: float) -> Tensor:
    """Truncated importance weights ``min(exp(old - behaviour), cap)``, detached.

    Corrects for the tokens having been sampled by a *behaviour* policy (the inference server's
    weights and numerics, or a designer several steps stale) rather than by the *old* policy
    the clipped ratio is taken against.

    Args:
        old_logprobs: shape ``(B, T)``, log-probs under the policy before this update.
        behaviour_logprobs: shape ``(B, T)``, log-probs the sampler reported.
        cap: truncation (> 0); ``0`` turns the correction off (all ones).

    Returns:
        shape ``(B, T)``, no gradient.
    """
    if cap < 0:
        raise ValueError(f"cap must be >= 0 (0: off), got {cap}")
    if old_logprobs.shape != behaviour_logprobs.shape:
        raise ValueError(
            f"old_logprobs {tuple(old_logprobs.shape)} and behaviour_logprobs"
            f" {tuple(behaviour_logprobs.shape)} differ in shape"
        )
    if cap == 0:
        return torch.ones_like(old_logprobs).detach()
    return torch.exp(old_logprobs.detach() - behaviour_logprobs.detach()).clamp(max=cap)


# ---------------------------------------------------------------------------------- aggregate

Aggregation = Callable[[Tensor, Tensor], Tensor]
"""``fn(values[B, T], mask[B, T]) -> scalar``."""


def _masked(values: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``values`` with masked positions set to 0 (no nan leaks), and the mask as bool."""
    if values.dim() != 2 or values.shape != mask.shape:
        raise ValueError(
            f"values {tuple(values.shape)} and mask {tuple(mask.shape)} must be the same (B, T)"
        )
    m = mask.to(torch.bool)
    return torch.where(m, values, torch.zeros_like(values)), m


def token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """``sum(v * m) / sum(m)`` over the whole batch: every token weighs the same.

    Shapes: ``(B, T), (B, T) -> ()``. An empty mask gives 0 (gradient path intact).
    """
    v, m = _masked(values, mask)
    return v.sum() / m.sum().clamp_min(1).to(v.dtype)


def sequence_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean over sequences of each sequence's token mean (the original GRPO's).

    Every sequence weighs the same, whatever its length. Sequences with no unmasked token are
    left out of the mean. Shapes: ``(B, T), (B, T) -> ()``. An empty mask gives 0 (gradient
    path intact).
    """
    v, m = _masked(values, mask)
    counts = m.sum(dim=1)  # (B,)
    per_seq = v.sum(dim=1) / counts.clamp_min(1).to(v.dtype)  # (B,); 0 where empty
    present = counts > 0
    return per_seq.sum() / present.sum().clamp_min(1).to(v.dtype)


def token_sum(values: Tensor, mask: Tensor) -> Tensor:
    """``sum(v * m) / B``: token losses summed, divided by the number of sequences.

    Every token weighs ``1 / B`` whatever the lengths of the sequences around it (no length
    bias, as in Dr. GRPO): ``token_mean`` divides by a token count that depends on the whole
    batch, and ``sequence_mean`` down-weights the tokens of long sequences. Dividing by the
    constant ``B`` (rather than not at all) only keeps the loss, and hence the learning rate,
    on the same scale whatever the batch size; being a constant, it makes micro-batch
    accumulation exact: the sum over micro-batches of ``(B_i / B) * token_sum(micro_i)``
    equals ``token_sum`` of the whole batch. Shapes: ``(B, T), (B, T) -> ()``; an empty
    mask (or ``B = 0``) gives 0 (gradient path intact).
    """
    v, _ = _masked(values, mask)
    return v.sum() / max(v.shape[0], 1)


AGGREGATIONS: dict[str, Aggregation] = {
    "token_mean": token_mean,
    "sequence_mean": sequence_mean,
    "token_sum": token_sum,
}
"""How masked per-token losses ``(B, T)`` become one scalar, by name."""


def get_aggregation(name: str) -> Aggregation:
    """The aggregation called ``name``; ValueError naming the valid ones otherwise."""
    return lookup(AGGREGATIONS, name, "aggregation")


def aggregate(values: Tensor, mask: Tensor, mode: str = "token_mean") -> Tensor:
    """Masked per-token values ``(B, T)`` to a scalar ``()`` by the aggregation ``mode``.

    Masked positions contribute nothing (not even a nan). An empty mask gives 0, still
    connected to ``values`` in the autograd graph (its gradient is zeros), so ``backward()``
    works on every rank of a distributed step.
    """
    return get_aggregation(mode)(values, mask)


# -------------------------------------------------------------------------------- policy loss


@dataclass(frozen=True)
class LossOutput:
    """The batch loss and its diagnostics.

    Attributes:
        loss: shape ``()``, with gradient to ``logprobs``.
        metrics: ``loss``, ``clip_fraction``, ``clip_low_fraction``, ``clip_high_fraction``,
            ``kl``, ``ratio_mean``, ``is_weight_mean`` (masked means over the unmasked tokens,
            0 over an empty mask) and ``tokens`` (how many tokens are unmasked).
    """

    loss: Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def _masked_mean(values: Tensor, m: Tensor) -> float:
    return float((torch.where(m, values, 0.0).sum() / m.sum().clamp_min(1)).item())


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    behaviour_logprobs: Tensor | None = None,
    is_cap: float = 2.0,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    aggregation: str = "token_mean",
) -> LossOutput:
    """GRPO's clipped surrogate with separate clip ranges ("clip-higher", DAPO).

    Per token, with ``ratio = exp(logprobs - old_logprobs)`` and ``A`` its sequence's
    advantage::

        loss_t = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A) * w_t
                 + kl_coef * kl_t

    where ``w_t = importance_weights(old_logprobs, behaviour_logprobs, is_cap)`` when
    ``behaviour_logprobs`` is given (else 1) and ``kl_t = kl_penalty(logprobs, ref_logprobs,
    kl_estimator)`` when ``ref_logprobs`` is given and ``kl_coef > 0`` (else 0); then
    aggregated over the unmasked tokens by ``aggregation``.

    Only ``logprobs`` receives gradient: ``old_logprobs``, ``advantages``,
    ``behaviour_logprobs`` and ``ref_logprobs`` are detached.

    Args:
        logprobs: shape ``(B, T)``, the sampled tokens' log-probs under the policy being
            trained (with gradient).
        old_logprobs: shape ``(B, T)``, under the policy before this update (the sampler's, on
            the first step of an on-policy update).
        advantages: shape ``(B,)``, one per sequence (see :mod:`spade.training.advantages`).
        mask: shape ``(B, T)``, bool or 0/1; nonzero on the tokens trained on.
        eps_low: the ratio is clipped below at ``1 - eps_low`` (in ``[0, 1]``).
        eps_high: ... and above at ``1 + eps_high`` (``>= 0``).
        behaviour_logprobs: shape ``(B, T)``, the sampler's log-probs when they differ from
            ``old_logprobs``; None: no importance correction.
        is_cap: truncation of the importance weights (0: correction off).
        ref_logprobs: shape ``(B, T)``, under the reference policy; None: no KL (metric 0).
        kl_coef: weight of the KL penalty (>= 0); the ``kl`` metric is reported whenever
            ``ref_logprobs`` is given, even at 0.
        kl_estimator: name in :data:`KL_ESTIMATORS`.
        aggregation: name in :data:`AGGREGATIONS`.

    Returns:
        :class:`LossOutput`. A token counts as clipped when the clipped branch is the minimum
        and differs from the unclipped one: ``A > 0`` and ``ratio > 1 + eps_high`` (high), or
        ``A < 0`` and ``ratio < 1 - eps_low`` (low); its gradient is then 0.
    """
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be (B, T), got {tuple(logprobs.shape)}")
    shape = logprobs.shape
    named = {"old_logprobs": old_logprobs, "mask": mask}
    if behaviour_logprobs is not None:
        named["behaviour_logprobs"] = behaviour_logprobs
    if ref_logprobs is not None:
        named["ref_logprobs"] = ref_logprobs
    for name, t in named.items():
        if t.shape != shape:
            raise ValueError(f"{name} {tuple(t.shape)} differs from logprobs {tuple(shape)}")
    if advantages.shape != (shape[0],):
        raise ValueError(f"advantages must be ({shape[0]},), got {tuple(advantages.shape)}")
    if not 0.0 <= eps_low <= 1.0:
        raise ValueError(f"eps_low must be in [0, 1], got {eps_low}")
    if eps_high < 0.0:
        raise ValueError(f"eps_high must be >= 0, got {eps_high}")
    if kl_coef < 0.0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    agg = get_aggregation(aggregation)  # fail on a bad name before any work
    kl_fn = get_kl_estimator(kl_estimator)

    m = mask.to(torch.bool)
    zeros = torch.zeros_like(logprobs)

    def keep(t: Tensor) -> Tensor:
        """Masked positions -> 0 before any arithmetic (no inf/nan in values or gradients)."""
        return torch.where(m, t, zeros)

    lp = keep(logprobs)
    old = keep(old_logprobs.detach().to(logprobs.dtype))
    adv = advantages.detach().to(logprobs.dtype)[:, None].expand(shape)  # (B, T)

    ratio = torch.exp(lp - old)  # (B, T); exactly 1 on masked positions
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)  # (B, T)

    if behaviour_logprobs is not None:
        beh = keep(behaviour_logprobs.detach().to(logprobs.dtype))
        weights = importance_weights(old, beh, is_cap)  # (B, T); 1 on masked positions
        per_token = per_token * weights
    else:
        beh = old  # no sampler's log-probs: no mismatch to report
        weights = torch.ones_like(per_token)

    if ref_logprobs is not None:
        ref = keep(ref_logprobs.detach().to(logprobs.dtype))
        kl = kl_fn(lp, ref)  # (B, T); 0 on masked positions
        if kl_coef > 0.0:
            per_token = per_token + kl_coef * kl
    else:
        kl = zeros

    loss = agg(per_token, m)

    with torch.no_grad():
        is_clipped = m & (clipped < unclipped)
        tokens = int(m.sum().item())
        denom = max(tokens, 1)
        metrics = {
            "loss": float(loss.detach().item()),
            "clip_fraction": int(is_clipped.sum().item()) / denom,
            "clip_low_fraction": int((is_clipped & (ratio < 1.0)).sum().item()) / denom,
            "clip_high_fraction": int((is_clipped & (ratio > 1.0)).sum().item()) / denom,
            "kl": _masked_mean(kl.detach(), m),
            "ratio_mean": _masked_mean(ratio.detach(), m),
            "is_weight_mean": _masked_mean(weights.detach(), m),
            **mismatch_metrics(old, beh, m),
            "tokens": float(tokens),
        }
    return LossOutput(loss=loss, metrics=metrics)


MISMATCH_BAND = (0.5, 2.0)
"""Sampler/trainer ratios outside this band are counted (``mismatch_outside``)."""


def mismatch_metrics(train_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor) -> dict:
    """How far the sampler's policy is from the trainer's on the trained tokens.

    With ``r = exp(train - behaviour)`` per token (tokens sampled from the behaviour policy):
    ``mismatch_kl`` is the mean of the k3 estimator ``r - 1 - log r`` (>= 0 per token, an
    unbiased estimate of KL(behaviour || train)), ``mismatch_outside`` the share of tokens with
    ``r`` outside :data:`MISMATCH_BAND`. Both 0 when the two agree.

    Args:
        train_logprobs: ``(B, T)``, pi_old's log-probs (the trainer's weights before the update).
        behaviour_logprobs: ``(B, T)``, the sampler's.
        mask: ``(B, T)`` bool, the trained tokens.
    """
    # float64: exp of a few nats in float32 loses the k3's small differences; off the mask the
    # sampler's log-prob is taken as the trainer's (gap 0, k3 0: padding adds nothing)
    train = train_logprobs.double()
    behaviour = torch.where(mask, behaviour_logprobs.double(), train)
    ratio = torch.exp(train - behaviour)
    low, high = MISMATCH_BAND
    outside = mask & ((ratio < low) | (ratio > high))
    denom = max(int(mask.sum().item()), 1)
    return {  # KL(behaviour || train) from the behaviour's samples: k3 with pi = the sampler
        "mismatch_kl": _masked_mean(kl_k3(behaviour, train).float(), mask),
        "mismatch_outside": int(outside.sum().item()) / denom,
    }
