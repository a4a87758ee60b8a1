"""Group-relative advantages for GRPO (docs/architecture.md §2.9).

A *group* is the set of samples whose rewards are compared with each other: an environment's
plays for the agent, or a skill's design attempts for the designer. Two estimators, chosen by
name from :data:`ADVANTAGES`:

- ``"zscore"`` (the agent's, ``TrainingConfig.advantage_std=True``):
  ``(r - mean_g) / (std_g + eps)`` with the **sample** standard deviation (Bessel's correction,
  ``n - 1`` in the denominator), as ``torch.std`` computes it and as GRPO implementations
  commonly do;
- ``"centred"`` (``advantage_std=False``, and the designer's per-skill centring,
  ``ScoringConfig.centre_per_skill``): ``r - mean_g``, no division;
- ``"batch_centred"`` (the designer with ``centre_per_skill=False``): ``r - mean`` over the
  whole batch, group ids ignored: one GRPO group of all design attempts.

:func:`designer_estimator` picks the designer's from ``ScoringConfig.centre_per_skill``.

Degenerate groups carry no learning signal and get an advantage of exactly 0: a group whose
rewards are all equal (even where floating-point rounding would make ``r - mean_g`` a tiny
non-zero number) and a group of one (whose sample std is undefined).

Group ids are arbitrary int64 labels: they need not be contiguous, sorted or start at 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from spade.registry import lookup

__all__ = [
    "ADVANTAGES",
    "AdvantageFn",
    "batch_centred",
    "centred",
    "designer_estimator",
    "get_advantage_fn",
    "group_advantages",
    "zscore",
]

AdvantageFn = Callable[[Tensor, Tensor], Tensor]
"""``fn(rewards[N], group_ids[N]) -> advantages[N]``."""


_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _check(rewards: Tensor, group_ids: Tensor) -> None:
    if rewards.dim() != 1 or group_ids.dim() != 1:
        raise ValueError(
            f"rewards and group_ids must be 1-D, got shapes {tuple(rewards.shape)}"
            f" and {tuple(group_ids.shape)}"
        )
    if rewards.shape[0] != group_ids.shape[0]:
        raise ValueError(f"{rewards.shape[0]} rewards but {group_ids.shape[0]} group ids")
    if group_ids.dtype not in _INT_DTYPES:
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}")


def group_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Rewards centred on their group's mean and, optionally, divided by its sample std.

    Args:
        rewards: shape ``(N,)``, one scalar reward per sample (integer rewards are promoted to
            the default float dtype; float dtypes are kept).
        group_ids: shape ``(N,)``, integer dtype (int64 usually); samples with the same id form
            a group.
        scale_by_std: divide by ``std_g + eps`` (z-score) where ``std_g`` is the group's sample
            standard deviation (``n_g - 1`` in the denominator); otherwise only centre.
        eps: added to the std before dividing; must be >= 0.

    Returns:
        shape ``(N,)``, same dtype and device as ``rewards`` (float). Exactly 0 for every
        sample of a group whose rewards are all equal, and for a group of one.
    """
    _check(rewards, group_ids)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if not rewards.dtype.is_floating_point:
        rewards = rewards.to(torch.get_default_dtype())
    n = rewards.shape[0]
    if n == 0:
        return rewards.clone()
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max().item()) + 1

    counts = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)
    counts = counts.index_add(0, inverse, torch.ones_like(rewards))  # (G,)
    sums = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)
    sums = sums.index_add(0, inverse, rewards)  # (G,)
    mean = sums / counts  # (G,)
    centred_r = rewards - mean[inverse]  # (N,)

    # all-equal groups (a group of one included) -> exactly 0, whatever the rounding
    fill = rewards.detach()
    g_max = torch.full((num_groups,), float("-inf"), dtype=rewards.dtype, device=rewards.device)
    g_max = g_max.scatter_reduce(0, inverse, fill, reduce="amax", include_self=True)
    g_min = torch.full((num_groups,), float("inf"), dtype=rewards.dtype, device=rewards.device)
    g_min = g_min.scatter_reduce(0, inverse, fill, reduce="amin", include_self=True)
    degenerate = (g_max == g_min)[inverse]  # (N,)

    if scale_by_std:
        sq = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)
        sq = sq.index_add(0, inverse, centred_r * centred_r)  # (G,)
        var = sq / (counts - 1).clamp_min(1)  # sample variance; groups of one are degenerate
        std = var.sqrt()  # (G,)
        out = centred_r / (std[inverse] + eps)
    else:
        out = centred_r
    return torch.where(degenerate, torch.zeros_like(out), out)


def zscore(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """``(r - mean_g) / (std_g + 1e-6)``, sample std; shapes ``(N,), (N,) -> (N,)``.

    See :func:`group_advantages` (``scale_by_std=True``).
    """
    return group_advantages(rewards, group_ids, scale_by_std=True)


def centred(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """``r - mean_g``, no division by the std; shapes ``(N,), (N,) -> (N,)``.

    The designer's per-skill centring when ``group_ids`` label skills. Exactly 0 for all-equal
    groups and groups of one. See :func:`group_advantages` (``scale_by_std=False``).
    """
    return group_advantages(rewards, group_ids, scale_by_std=False)


def batch_centred(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """``r - mean`` over the whole batch (``group_ids`` are checked, then ignored); shapes
    ``(N,), (N,) -> (N,)``. Exactly 0 when every reward is equal."""
    _check(rewards, group_ids)
    return group_advantages(rewards, torch.zeros_like(group_ids), scale_by_std=False)


def designer_estimator(centre_per_skill: bool) -> str:
    """The designer's estimator: per-skill centring (``"centred"``, the samples' groups are
    skills) with ``ScoringConfig.centre_per_skill``, else the whole batch as one group."""
    return "centred" if centre_per_skill else "batch_centred"


ADVANTAGES: dict[str, AdvantageFn] = {
    "zscore": zscore,
    "centred": centred,
    "batch_centred": batch_centred,
}
"""Advantage estimators by name: ``fn(rewards[N], group_ids[N]) -> advantages[N]``."""


def get_advantage_fn(name: str) -> AdvantageFn:
    """The advantage estimator called ``name``; ValueError naming the valid ones otherwise."""
    return lookup(ADVANTAGES, name, "advantage estimator")
