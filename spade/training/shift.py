"""How far an update moved the policy on the tokens it trained on, and in which direction.

An update's loss and gradient norm do not say whether the weights moved enough to matter, nor
whether they moved toward the answers the advantages favour; a learning-rate question
("did twelve steps at this rate change anything?") needs both. With ``training.measure_shift``
the trainer scores its batch again after the update (one forward pass without gradient) and
compares the log-probs with pi_old's, the weights before the update:

- ``shift_kl``: the k3 estimate ``r - 1 - log r``, ``r = exp(new - old)``, mean per trained
  token: KL(pi_old || pi_new) on the batch's tokens (sampled from pi_old up to the sampler's
  mismatch), >= 0 per token, 0 when nothing moved;
- ``shift_up`` / ``shift_down``: the mean change ``new - old`` per trained token of the samples
  with a positive / negative advantage (nats per token): a working update raises the first and
  lowers the second. Samples with advantage 0 count in ``shift_kl`` only.

:func:`shift_sums` is one micro-batch's sums (added over micro-batches and ranks);
:func:`shift_metrics` turns the totals into the three figures.
"""

from __future__ import annotations

import torch
from torch import Tensor

from spade.training.loss import kl_k3

SUM_KEYS = ("tokens", "kl", "up_tokens", "up", "down_tokens", "down")
"""The keys of :func:`shift_sums`, in the order the trainer sums them across ranks."""


def shift_sums(old: Tensor, new: Tensor, advantages: Tensor, mask: Tensor) -> dict[str, float]:
    """One micro-batch's sums over its trained tokens.

    Args:
        old: ``(B, T)``, log-probs before the update (pi_old).
        new: ``(B, T)``, log-probs of the same tokens after it.
        advantages: ``(B,)``, each sample's advantage.
        mask: ``(B, T)``, > 0 on the trained tokens (values elsewhere are ignored).

    Returns:
        ``tokens`` (trained tokens), ``kl`` (sum of the k3 terms), ``up_tokens`` / ``up`` (count
        and sum of ``new - old`` on samples with advantage > 0), ``down_tokens`` / ``down`` (the
        same for advantage < 0).
    """
    if old.shape != new.shape or old.shape != mask.shape:
        raise ValueError(f"old {tuple(old.shape)}, new {tuple(new.shape)} and mask"
                         f" {tuple(mask.shape)} must have one shape")  # fmt: skip
    if advantages.shape != old.shape[:1]:
        raise ValueError(f"advantages {tuple(advantages.shape)} must be ({old.shape[0]},)")
    m = mask > 0
    zero = torch.zeros((), dtype=torch.float64)
    # double: the k3 term of a small gap is a difference of nearly equal numbers
    old, new = old.double(), new.double()
    gap = torch.where(m, new - old, zero)
    k3 = torch.where(m, kl_k3(old, new), zero)  # the loss's own k3, KL(old || new)
    up = m & (advantages > 0).unsqueeze(1)
    down = m & (advantages < 0).unsqueeze(1)
    return {
        "tokens": float(m.sum().item()),
        "kl": float(k3.sum().item()),
        "up_tokens": float(up.sum().item()),
        "up": float(gap[up].sum().item()),
        "down_tokens": float(down.sum().item()),
        "down": float(gap[down].sum().item()),
    }


def shift_metrics(sums: dict[str, float]) -> dict[str, float]:
    """``shift_kl``, ``shift_up`` and ``shift_down`` from summed :func:`shift_sums` (a mean over
    no tokens is 0: a batch without positive samples did not raise any)."""

    def per(total: str, count: str) -> float:
        return sums[total] / sums[count] if sums[count] > 0 else 0.0

    return {
        "shift_kl": per("kl", "tokens"),
        "shift_up": per("up", "up_tokens"),
        "shift_down": per("down", "down_tokens"),
    }
