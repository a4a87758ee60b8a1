"""Designer rewards: how good a design was for the curriculum, pure and chosen by name.

docs/architecture.md §2.7. A valid design is scored by the function
``ScoringConfig.designer_reward`` names (:data:`DESIGNER_REWARDS`); a design that failed
verification by the one ``ScoringConfig.rejected_reward`` names (:data:`REJECTED_REWARDS`): ``flat``
(the reference: ``config.invalid_reward``, or ``config.timeout_penalty`` when it failed by timing
out) or ``graded`` (by how far it got through the verifier: its tier in :data:`REJECTED_TIERS`, then
its progress within the tier). Then, with
``config.centre_per_skill``, the mean reward of each skill is subtracted (no division by the
std), so the designer is compared with itself on the same skill.

- ``blend``: ``w * plateau(mean) + (1 - w) * clip(regret / scale, 0, 1)`` (the paper's
  launchers), ``mean`` the unhinted plays' mean return: as the reference's plateau, on the mean
  reward, so partial credit counts (an environment whose every play ends at 0.5 sits on the
  plateau, where its win rate of 0 would put it at 0);
- ``regret``: the regret itself;
- ``solve_rate``: ``plateau(mean)`` only;
- ``learning_potential``: ``|win - EMA|``, the EMA being a slow average of the skill's past win
  rates (state passed in and out: these functions stay pure).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import TYPE_CHECKING

from spade.registry import lookup

if TYPE_CHECKING:  # only attributes are read; keeps this module free of pydantic at import
    from spade.config import ScoringConfig


@dataclass(frozen=True)
class DesignOutcome:
    """What one design attempt came to, as far as scoring needs it.

    Attributes:
        env_id: the design's id.
        skill: the skill it was designed for (the centring group and the EMA key).
        valid: whether it passed verification (and was evaluated).
        failure_kind: why it failed (a ``spade.records.FailureKind`` value such as
            ``"timeout"``); None for a valid design.
        win_rate: unhinted win rate in [0, 1]; required when valid.
        hinted_win_rate: hinted win rate in [0, 1], for the record; optional.
        regret: the regret estimate, ``>= 0``; required when valid.
        mean_return: the unhinted plays' mean return in [-1, 1], what the plateau reads;
            required when valid.
        progress: of a rejected design, how far it got within its failure's tier, in [0, 1]
            (its verdict's ``progress``: :class:`spade.records.Verdict`); 0 when unknown.
    """

    env_id: str
    skill: str
    valid: bool
    failure_kind: str | None = None
    win_rate: float | None = None
    hinted_win_rate: float | None = None
    regret: float | None = None
    progress: float = 0.0
    mean_return: float | None = None

    def __post_init__(self) -> None:
        where = f"design {self.env_id!r}"
        if not 0.0 <= self.progress <= 1.0:
            raise ValueError(f"{where}: progress must be in [0, 1], got {self.progress!r}")
        if self.valid and self.failure_kind is not None:
            raise ValueError(f"{where} is valid but has failure_kind {self.failure_kind!r}")
        needs = (self.win_rate, self.regret, self.mean_return)
        if self.valid and any(value is None for value in needs):
            raise ValueError(f"{where} is valid: it needs a win_rate, a regret and a mean_return")
        if self.mean_return is not None and not -1.0 <= self.mean_return <= 1.0:
            raise ValueError(f"{where}: mean_return must be in [-1, 1], got {self.mean_return!r}")
        for name in ("win_rate", "hinted_win_rate"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{where}: {name} must be in [0, 1], got {value!r}")
        if self.regret is not None and not (math.isfinite(self.regret) and self.regret >= 0):
            raise ValueError(f"{where}: regret must be a finite number >= 0, got {self.regret!r}")

    def rates(self) -> tuple[float, float]:
        """``(win_rate, regret)`` of a valid design."""
        if self.win_rate is None or self.regret is None:
            raise ValueError(f"design {self.env_id!r} has no win rate/regret (is it valid?)")
        return self.win_rate, self.regret


def plateau(x: float, low: float = 0.4, high: float = 0.6, ramp: float = 0.25) -> float:
    """1 for ``x`` (the rewards pass a mean return: partial credit counts) on ``[low, high]``,
    falling linearly to 0 over ``ramp`` outside, 0 beyond.

    So ``plateau(low - ramp) == plateau(high + ramp) == 0``.
    """
    if low > high or ramp <= 0:
        raise ValueError(f"plateau needs low <= high and ramp > 0, got {low}, {high}, {ramp}")
    if low <= x <= high:
        return 1.0
    distance = low - x if x < low else x - high
    return max(0.0, 1.0 - distance / ramp)


def blend(
    mean_return: float,
    regret: float,
    *,
    plateau_weight: float = 0.6,
    regret_scale: float = 0.15,
    low: float = 0.4,
    high: float = 0.6,
    ramp: float = 0.25,
) -> float:
    """``plateau_weight * plateau(mean) + (1 - plateau_weight) * clip(regret / scale, 0, 1)``,
    ``mean`` the unhinted mean return (the win rate where every play ends at 0 or 1)."""
    if regret_scale <= 0:
        raise ValueError(f"regret_scale must be > 0, got {regret_scale}")
    regret_part = min(1.0, max(0.0, regret / regret_scale))
    return (
        plateau_weight * plateau(mean_return, low, high, ramp) + (1 - plateau_weight) * regret_part
    )


def learning_potential(
    win_rate: float, ema: float | None, alpha: float = 0.1
) -> tuple[float, float]:
    """``(|win_rate - ema|, new ema)``; with no history (``ema is None``) ``(0.0, win_rate)``.

    The EMA starts at the first win rate it sees, then moves ``alpha`` of the way to each new one:
    ``new = (1 - alpha) * ema + alpha * win_rate``.
    """
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    if ema is None:
        return 0.0, win_rate
    return abs(win_rate - ema), (1 - alpha) * ema + alpha * win_rate


DesignerReward = Callable[["DesignOutcome", "ScoringConfig", Mapping[str, float]], float]
"""``(valid outcome, config, EMA by skill before this batch) -> reward``."""


def _plateau_of(mean_return: float, config: ScoringConfig) -> float:
    return plateau(mean_return, config.plateau_low, config.plateau_high, config.plateau_ramp)


def _mean_return(o: DesignOutcome) -> float:
    if o.mean_return is None:
        raise ValueError(f"design {o.env_id!r} has no mean return (is it valid?)")
    return o.mean_return


def _blend_reward(o: DesignOutcome, config: ScoringConfig, ema: Mapping[str, float]) -> float:
    return blend(
        _mean_return(o),
        o.rates()[1],
        plateau_weight=config.plateau_weight,
        regret_scale=config.regret_scale,
        low=config.plateau_low,
        high=config.plateau_high,
        ramp=config.plateau_ramp,
    )


def _regret_reward(o: DesignOutcome, config: ScoringConfig, ema: Mapping[str, float]) -> float:
    return o.rates()[1]


def _solve_rate_reward(o: DesignOutcome, config: ScoringConfig, ema: Mapping[str, float]) -> float:
    return _plateau_of(_mean_return(o), config)


def _lp_reward(o: DesignOutcome, config: ScoringConfig, ema: Mapping[str, float]) -> float:
    return learning_potential(o.rates()[0], ema.get(o.skill), config.ema_alpha)[0]


DESIGNER_REWARDS: dict[str, DesignerReward] = {
    "blend": _blend_reward,
    "regret": _regret_reward,
    "solve_rate": _solve_rate_reward,
    "learning_potential": _lp_reward,
}
"""Rewards of valid designs by the name ``ScoringConfig.designer_reward`` uses."""


def get_designer_reward(name: str) -> DesignerReward:
    """The reward called ``name``; ValueError naming the valid ones otherwise."""
    return lookup(DESIGNER_REWARDS, name, "designer reward")


REJECTED_TIERS: tuple[tuple[str, ...], ...] = (
    # a copy of a reference, lowest: placed higher, the reward would pay for copying, which is
    # what small models do when shown an example; below no code, so that a round whose
    # attempts were a copy and a cut-off answer still ranks them (the 0.5B coder's usual pair)
    ("duplicate",),
    ("parse", "rejected"),  # no code: the model wrote nothing usable
    ("syntax",),  # code that does not parse
    ("import_denied", "policy_denied"),  # code that parses, refused before it runs
    ("contract", "exited", "protocol"),  # it runs, but is not an environment of the contract
    (  # an environment that broke while played: raised, or ran into a limit of the jail
        "crash",
        "timeout",
        "session_expired",  # in verification no model turn waits between calls: a timeout
        "memory",
        "output_limit",
        "fs_denied",
        "net_denied",
        "proc_limit",
        "disk_limit",
    ),
    (  # a working environment the verifier judged unusable
        "infeasible",
        "trivial",
        "nondeterministic",
        "no_termination",
        "seed_independent",
        "unsolvable",
        "leaks_answer",
        "perverse_credit",
    ),
)
"""Failure kinds of rejected designs by how far through the verifier they got, lowest first.

``parse`` comes from the designer (no code), ``rejected`` is a rejection without a named
failure; the rest are :class:`spade.records.FailureKind` values (kept as strings,
so this module needs no sandbox import; a test checks every kind is here). A design accepted
after a repair turn is valid and credited as such; its first answer, which is what the designer
trains on, gets the reward of what it was (:func:`spade.scoring.outcomes.first_answer_reward`).
An attempt whose request failed on our side (``inference``) is no design and has no tier: it is
left out of scoring (:func:`spade.scoring.outcomes.score`).
"""


def rejected_tier(failure_kind: str) -> int:
    """The index of ``failure_kind`` in :data:`REJECTED_TIERS`; ValueError for an unknown kind
    (a kind nobody placed is a bug to fix here, not a reward to guess)."""
    for tier, kinds in enumerate(REJECTED_TIERS):
        if failure_kind in kinds:
            return tier
    raise ValueError(f"failure kind {failure_kind!r} has no place in REJECTED_TIERS")


RejectedReward = Callable[[str, float, "ScoringConfig"], float]
"""``(failure kind of a rejected design, its progress in [0, 1], config) -> reward``."""

WITHIN_TIER = 0.5
"""Share of a tier's step that progress within the tier can earn: below 1, so that no progress
lifts a design to the next tier's value."""


def flat_rejected(failure_kind: str, progress: float, config: ScoringConfig) -> float:
    """The reference's: ``timeout_penalty`` for a timeout, else ``invalid_reward`` (progress
    is ignored)."""
    return config.timeout_penalty if failure_kind == "timeout" else config.invalid_reward


def graded_rejected(failure_kind: str, progress: float, config: ScoringConfig) -> float:
    """``graded_floor * (K - tier - WITHIN_TIER * progress) / K``, ``K = len(REJECTED_TIERS)``.

    With ``graded_floor = -1`` and no progress: a duplicate -1, no code -6/7, syntax -5/7,
    import/policy -4/7, contract -3/7, crash/limits -2/7, a verifier judgement (infeasible,
    trivial, ...) -1/7; progress in the tier (checks passed; the share of a syntax error's or a
    cut-off answer's code that parses; a copy's distance from the copy threshold) earns up to
    half a step more, so two designs that failed the same way
    at different depths are still told apart (with two attempts a round, equal rewards mean no
    update). Every value is below 0, and every valid design's reward is >= 0
    (:data:`DESIGNER_REWARDS`), so the designer always prefers a valid design; after centring
    within a skill the order stays.
    """
    if not 0.0 <= progress <= 1.0:
        raise ValueError(f"progress must be in [0, 1], got {progress!r}")
    k = len(REJECTED_TIERS)
    return config.graded_floor * (k - rejected_tier(failure_kind) - WITHIN_TIER * progress) / k


REJECTED_REWARDS: dict[str, RejectedReward] = {"flat": flat_rejected, "graded": graded_rejected}
"""Rewards of rejected designs by the name ``ScoringConfig.rejected_reward`` uses."""


def get_rejected_reward(name: str) -> RejectedReward:
    """The rejected-design reward called ``name``; ValueError naming the valid ones otherwise."""
    return lookup(REJECTED_REWARDS, name, "rejected-design reward")


def centre_per_skill(rewards: Sequence[float], skills: Sequence[str]) -> list[float]:
    """Subtract from each reward the mean reward of its skill (no division by the std).

    Args:
        rewards: shape ``(n,)``; skills: shape ``(n,)``, the group of each reward.
    """
    if len(rewards) != len(skills):
        raise ValueError(f"{len(rewards)} rewards but {len(skills)} skills")
    groups: dict[str, list[float]] = defaultdict(list)
    for reward, skill in zip(rewards, skills, strict=True):
        groups[skill].append(reward)
    means = {skill: fmean(values) for skill, values in groups.items()}
    return [reward - means[skill] for reward, skill in zip(rewards, skills, strict=True)]


def update_ema(
    ema: Mapping[str, float], outcomes: Sequence[DesignOutcome], alpha: float
) -> dict[str, float]:
    """The EMA by skill after one batch: one step per skill, towards its mean valid win rate.

    One step per batch (not per design) keeps the result independent of the designs' order.
    Skills with no valid design in the batch keep their value.
    """
    wins: dict[str, list[float]] = defaultdict(list)
    for outcome in outcomes:
        if outcome.valid:
            wins[outcome.skill].append(outcome.rates()[0])
    new = dict(ema)
    for skill, values in wins.items():
        new[skill] = learning_potential(fmean(values), ema.get(skill), alpha)[1]
    return new


def raw_rewards(
    outcomes: Sequence[DesignOutcome],
    config: ScoringConfig,
    ema: Mapping[str, float] | None = None,
) -> list[float]:
    """Each design's reward before any centring, shape ``(n,)`` in the order of ``outcomes``:
    valid ones by ``config.designer_reward``, rejected ones by ``config.rejected_reward``
    (a rejection without a failure kind counts as ``"rejected"``)."""
    reward_of = get_designer_reward(config.designer_reward)
    rejected_of = get_rejected_reward(config.rejected_reward)
    previous = dict(ema or {})
    return [
        reward_of(o, config, previous)
        if o.valid
        else rejected_of(str(o.failure_kind or "rejected"), o.progress, config)
        for o in outcomes
    ]


def designer_rewards(
    outcomes: Sequence[DesignOutcome],
    config: ScoringConfig,
    ema: Mapping[str, float] | None = None,
) -> tuple[list[float], dict[str, float]]:
    """Reward of each design attempt of a batch, and the updated win-rate EMA by skill.

    Args:
        outcomes: the batch, shape ``(n,)``.
        config: names the rewards and holds their parameters, penalties and
            ``centre_per_skill``.
        ema: slow EMA of past win rates by skill (None: no history yet).

    Returns:
        ``(rewards, new_ema)``: rewards of shape ``(n,)`` in the order of ``outcomes``: the
        :func:`raw_rewards`, then centred. Centring runs over *all* designs of a skill, invalid
        ones included, as the reference does: a lone design of its skill is centred to 0. The
        EMA is updated whatever reward is chosen, so switching to ``learning_potential``
        mid-campaign finds it warm.
    """
    _, rewards, new_ema = designer_rewards_with_raw(outcomes, config, ema)
    return rewards, new_ema


def designer_rewards_with_raw(
    outcomes: Sequence[DesignOutcome],
    config: ScoringConfig,
    ema: Mapping[str, float] | None = None,
) -> tuple[list[float], list[float], dict[str, float]]:
    """:func:`designer_rewards` with the rewards before centring: ``(raw, rewards, new_ema)``,
    ``raw`` and ``rewards`` of shape ``(n,)``."""
    previous = dict(ema or {})
    raw = raw_rewards(outcomes, config, previous)
    rewards = centre_per_skill(raw, [o.skill for o in outcomes]) if config.centre_per_skill else raw
    return raw, rewards, update_ema(previous, outcomes, config.ema_alpha)
