"""Regret estimators and the win rate: pure functions of per-episode numbers.

The agent's regret on an environment is how much better it plays *with* the privileged hint
than without it (docs/architecture.md §2.7). Estimators are chosen by name from
:data:`REGRET_ESTIMATORS` (``ScoringConfig.regret_estimator``):

- ``mean_gap``: ``max(0, mean(hinted) - mean(unhinted))`` — the reference's estimator;
- ``max_gap``: ``max(0, max(hinted) - mean(unhinted))`` — PAIRED-style: the best hinted play
  stands for what the environment allows.

Inputs are episode returns (floats, normally in [-1, 1]). An episode the environment broke or
that did not terminate returns 0.0 by the return rule, so the caller passes 0.0 for it. A play
that failed on our side (inference: ``Trajectory.failed``) measures nothing and is left out by
the caller (:mod:`spade.agent.evaluate`): there is no "failed" case here.

Beside the estimator, :func:`instance_gaps` and :func:`paired_regret` give the *paired* estimate
the evaluation reports next to it: hinted and unhinted plays meet the same instances (seeds),
so the gap can be taken per instance, which takes the instances' own spread out of it and
gives it an interval. It is not in :data:`REGRET_ESTIMATORS`: an estimator there sees two lists
of returns, no instances, and the curriculum's number stays the reference's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import fmean

from spade.registry import lookup
from spade.stats import bootstrap_interval

RegretEstimator = Callable[[Sequence[float], Sequence[float]], float]
"""``(hinted returns, unhinted returns) -> regret >= 0``."""


def _checked(returns: Sequence[float], name: str) -> Sequence[float]:
    # A NaN would silently poison every mean downstream; fail at the boundary instead.
    for value in returns:
        if not math.isfinite(value):
            raise ValueError(f"{name} returns must be finite numbers, got {value!r}")
    return returns


def mean_gap(hinted: Sequence[float], unhinted: Sequence[float]) -> float:
    """``max(0, mean(hinted) - mean(unhinted))``.

    Args:
        hinted: returns of the plays with the hint, shape ``(n_hinted,)``.
        unhinted: returns of the plays without it, shape ``(n_unhinted,)``.

    Returns:
        The regret, ``>= 0``. It is 0.0 when either side has no plays: with no hinted plays
        there is no evidence of a gap, and with no unhinted plays the gap is undefined (reading
        a missing mean as 0 would invent regret from nothing).
    """
    _checked(hinted, "hinted")
    _checked(unhinted, "unhinted")
    if not hinted or not unhinted:
        return 0.0
    return max(0.0, fmean(hinted) - fmean(unhinted))


def max_gap(hinted: Sequence[float], unhinted: Sequence[float]) -> float:
    """PAIRED-style ``max(0, max(hinted) - mean(unhinted))``.

    Same shapes and the same empty-side rule (0.0) as :func:`mean_gap`.
    """
    _checked(hinted, "hinted")
    _checked(unhinted, "unhinted")
    if not hinted or not unhinted:
        return 0.0
    return max(0.0, max(hinted) - fmean(unhinted))


REGRET_ESTIMATORS: dict[str, RegretEstimator] = {"mean_gap": mean_gap, "max_gap": max_gap}
"""Estimators by the name ``ScoringConfig.regret_estimator`` uses."""


def get_regret_estimator(name: str) -> RegretEstimator:
    """The estimator called ``name``; ValueError naming the valid ones otherwise."""
    return lookup(REGRET_ESTIMATORS, name, "regret estimator")


def instance_gaps(
    hinted: Sequence[tuple[int, float]], unhinted: Sequence[tuple[int, float]]
) -> list[float]:
    """Per instance both groups played: mean hinted return minus mean unhinted return on it.

    Args:
        hinted: ``(instance seed, return)`` of each hinted play, shape ``(n_hinted, 2)``; an
            instance played hinted more than once (more hinted plays than unhinted ones) is
            averaged over its replicates, so it counts once.
        unhinted: likewise for the plays without the hint, shape ``(n_unhinted, 2)``.

    Returns:
        One gap per shared instance, shape ``(n_shared,)``, in the order the unhinted plays
        first meet them; instances only one group played are left out (empty: none shared).
    """
    _checked([r for _, r in hinted], "hinted")
    _checked([r for _, r in unhinted], "unhinted")
    by_seed: dict[int, tuple[list[float], list[float]]] = {}
    for seed, value in unhinted:
        by_seed.setdefault(seed, ([], []))[1].append(value)
    for seed, value in hinted:
        if seed in by_seed:
            by_seed[seed][0].append(value)
    return [fmean(h) - fmean(u) for h, u in by_seed.values() if h]


def paired_regret(gaps: Sequence[float]) -> tuple[float, tuple[float, float]] | None:
    """The paired regret ``max(0, mean(gaps))`` and its 95% interval; None for no gaps.

    Args:
        gaps: per-instance gaps (:func:`instance_gaps`), shape ``(n_shared,)``.

    Returns:
        ``(estimate, (low, high))``: the interval is the seeded percentile bootstrap of the mean
        over instances (:func:`spade.stats.bootstrap_interval`), its ends floored at 0 as the
        estimate is (a percentile interval follows a monotone map, so these are the ends of
        ``max(0, mean)``'s own interval).
    """
    _checked(gaps, "gap")
    interval = bootstrap_interval(gaps)
    if interval is None:
        return None
    low, high = interval
    return max(0.0, fmean(gaps)), (max(0.0, low), max(0.0, high))


def win_rate(successes: Sequence[bool]) -> float:
    """Share of successful episodes, in [0, 1]; 0.0 when there are none.

    Args:
        successes: one flag per episode, shape ``(n_plays,)``.
    """
    if not successes:
        return 0.0
    return sum(1 for ok in successes if ok) / len(successes)
