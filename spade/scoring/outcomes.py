"""Joining a batch of designs with their evaluations: designer rewards and memory records.

The pure math lives in :mod:`spade.scoring.rewards` (regret in :mod:`spade.curriculum`); this
module only lines up each design attempt with what its environment scored, so that the score
and remember stages are one call each.
Attempts that failed on our side (:attr:`DesignAttempt.failed`: an outage, not a design) are
left out of both: no reward, no part in the centring or the EMA, no memory record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean

from spade.config import ScoringConfig
from spade.curriculum.memory import MemoryRecord
from spade.designer.extract import parse_progress
from spade.records import DesignAttempt, EnvEvaluation
from spade.scoring.rewards import (
    DesignOutcome,
    designer_rewards_with_raw,
    get_rejected_reward,
)


@dataclass(frozen=True)
class ScoredAttempt:
    """One design attempt with its outcome and designer reward (``raw_reward`` before the
    centring per skill, ``reward`` after it: what the design is credited with).

    ``trained_raw`` is the reward of the answer the designer trains on, its first answer,
    before centring: the design's own for an answer that was never repaired; for a repaired
    one, the reward of what that first answer was (rejected, with its failure and progress):
    the repair's program is another program, whose reward the first answer's tokens did not
    earn. The training stage centres these once, over the answers it trains on."""

    attempt: DesignAttempt
    outcome: DesignOutcome
    reward: float
    raw_reward: float
    trained_raw: float


def outcomes(
    attempts: Sequence[DesignAttempt], evaluations: Sequence[EnvEvaluation]
) -> list[DesignOutcome]:
    """The scoring view of every attempt (none may have failed on our side: see :func:`score`);
    an accepted design without an evaluation is an error in our pipeline, not in the design."""
    by_env = {e.env_id: e for e in evaluations}
    out = []
    for i, att in enumerate(attempts):
        if att.failed:  # an outage has no outcome: scoring one is a bug upstream
            raise ValueError(f"attempt {att.slot}.{att.attempt} failed on the inference side")
        ident = att.env_id or f"slot{att.slot}-attempt{att.attempt}-{i}"
        if not att.accepted:
            kind = att.failure_kind or "rejected"
            if kind == "parse":  # no verdict: how much of its open code block parses
                progress = parse_progress(att.completion)
            else:
                progress = float((att.verdict or {}).get("progress") or 0.0)
            out.append(DesignOutcome(ident, att.skill, False, kind, progress=progress))
            continue
        ev = by_env[ident]
        mean = fmean(ev.unhinted_returns) if ev.unhinted_returns else 0.0
        out.append(
            DesignOutcome(
                ident,
                att.skill,
                True,
                None,
                ev.win_rate,
                ev.hinted_win_rate,
                ev.regret,
                mean_return=mean,
            )
        )
    return out


def score(
    attempts: Sequence[DesignAttempt],
    evaluations: Sequence[EnvEvaluation],
    config: ScoringConfig,
    ema: Mapping[str, float] | None = None,
) -> tuple[list[ScoredAttempt], dict[str, float]]:
    """Designer rewards for every attempt (rejected ones included, failed ones left out: the
    result holds the others, in order) and the updated EMA.

    Only designs are scored: evaluations of pool environments (``source == "pool"``) in
    ``evaluations`` are ignored here, so the designer is never rewarded for them and they do
    not move the EMA."""
    measured = [a for a in attempts if not a.failed]
    outs = outcomes(measured, evaluations)
    raw, rewards, new_ema = designer_rewards_with_raw(outs, config, ema)
    trained = [first_answer_reward(a, w, config) for a, w in zip(measured, raw, strict=True)]
    scored = [
        ScoredAttempt(a, o, r, w, t)
        for a, o, r, w, t in zip(measured, outs, rewards, raw, trained, strict=True)
    ]
    return scored, new_ema


def first_answer_reward(att: DesignAttempt, raw: float, config: ScoringConfig) -> float:
    """The uncentred reward of ``att``'s first answer (what the designer trains on): ``raw``,
    the design's, unless a repair turn replaced that answer; then the reward of a design
    rejected as the first answer was (``config.rejected_reward`` of its failure kind and
    progress)."""
    if not att.repairs or att.first_failure_kind is None:
        return raw
    kind = att.first_failure_kind
    progress = parse_progress(att.completion) if kind == "parse" else att.first_progress
    return get_rejected_reward(config.rejected_reward)(kind, progress, config)


NOVELTY_CHECKS = ("novelty",)
"""Names of the verifier checks that reject a copy of an earlier or pooled environment (failure
kind ``duplicate``): an accepted design whose verdict passed one is *novel*."""


PLAYER_CHECKS = ("informative", "winnable", "leaks_answer", "perverse_credit", "novelty")
"""The verifier's checks that judge a design as a player would meet it (what it tells, whether
it can be won by playing, whether it can be read off, what its credit rewards, whether it is new):
the campaign lists their reasons beside each design it played."""


def player_checks(att: DesignAttempt) -> dict[str, str]:
    """The reasons of :data:`PLAYER_CHECKS` in ``att``'s verdict, by check, in that order (those
    that ran)."""
    ran = {c.get("name"): c.get("reason") or "" for c in (att.verdict or {}).get("checks") or []}
    return {name: str(ran[name]) for name in PLAYER_CHECKS if name in ran}


def design_flags(att: DesignAttempt) -> dict[str, bool | None]:
    """``novel``: accepted, and a novelty check passed (None when no such check ran: a verifier
    without one cannot tell); ``repaired``: accepted after a repair turn (its first answer
    failed; the designer is still scored on the final outcome)."""
    checks = (att.verdict or {}).get("checks") or []
    ran = [c for c in checks if c.get("name") in NOVELTY_CHECKS]
    novel = (att.accepted and all(c.get("passed") for c in ran)) if ran else None
    return {"novel": novel, "repaired": att.accepted_after_repair}


def memory_records(
    attempts: Sequence[DesignAttempt], evaluations: Sequence[EnvEvaluation], round_index: int
) -> list[MemoryRecord]:
    """Records of the accepted, evaluated designs, for the environment memory."""
    by_env = {e.env_id: e for e in evaluations}
    return [
        MemoryRecord(
            env_id=a.env_id,
            skill=a.skill,
            code_head=a.code or "",
            win_rate=by_env[a.env_id].win_rate,
            regret=by_env[a.env_id].regret,
            round=round_index,
            hint=a.hint,
            accepted=True,
            mean_return=fmean(by_env[a.env_id].unhinted_returns)
            if by_env[a.env_id].unhinted_returns
            else None,
            parent_id=a.parent_id,
        )
        for a in attempts
        if a.accepted and a.env_id in by_env
    ]
