"""The score stage: designer rewards for every design attempt, and the updated EMA."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spade.pipeline.context import RoundContext
from spade.pipeline.keys import fingerprint
from spade.pipeline.record import StageRecord
from spade.pipeline.stage import Stage
from spade.records import DesignAttempt, EnvEvaluation
from spade.scoring.outcomes import ScoredAttempt, design_flags, player_checks, score
from spade.stats import mean


@dataclass
class RoundScores:
    """What the score stage returns: the reward of every attempt that did not fail on our side
    (in order) and the updated EMA."""

    scored: list[ScoredAttempt]
    ema: dict[str, float]

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.scored]


def score_round(
    ctx: RoundContext,
    attempts: list[DesignAttempt],
    evaluations: list[EnvEvaluation],
    ema: dict[str, float],
) -> RoundScores:
    """Designer rewards for every attempt (rejected ones included) and the new EMA.

    ``scored.jsonl`` holds a row per design attempt (``source: designed``, in attempt order:
    the designer's training reads them by position; an attempt that failed on our side has
    ``failed: true`` and no reward), then a row per pool environment played (``source: pool``,
    no reward: the designer is never rewarded for those). Rows of environments played carry
    their mean unhinted and hinted returns (``mean_return``, ``hinted_mean_return``).
    """
    scored, new_ema = score(attempts, evaluations, ctx.config.scoring, ema)
    rec = StageRecord(ctx, "score", {"ema": fingerprint(ema)})
    by_attempt = {id(s.attempt): s for s in scored}
    returns = {e.env_id: mean_returns(e) for e in evaluations}
    rows = [_row(by_attempt[id(a)]) if id(a) in by_attempt else _failed_row(a) for a in attempts]
    for row in rows:  # an accepted design's plays: partial credit shows where wins do not
        row |= returns.get(row["env_id"], NO_RETURNS) if row["accepted"] else NO_RETURNS
    rows += [
        {
            "env_id": e.env_id,
            "skill": e.skill,
            "source": "pool",
            "accepted": True,
            "failure": None,
            "progress": None,
            "win_rate": e.win_rate,
            "hinted_win_rate": e.hinted_win_rate,
            "regret": e.regret,
            **returns[e.env_id],
            "reward": None,
            "raw_reward": None,
            "trained_raw_reward": None,
        }
        for e in evaluations
        if e.source == "pool"
    ]
    rec.write_jsonl("scored.jsonl", rows)
    rec.write_json("ema.json", new_ema)
    rec.commit()
    return RoundScores(scored, new_ema)


NO_RETURNS: dict[str, float | None] = {"mean_return": None, "hinted_mean_return": None}


def mean_returns(e: EnvEvaluation) -> dict[str, float | None]:
    """The mean unhinted and hinted episode return of an environment's plays (None: no play
    of that kind): partial credit, where a win rate counts only full wins."""
    return {"mean_return": mean(e.unhinted_returns), "hinted_mean_return": mean(e.hinted_returns)}


def _row(s: ScoredAttempt) -> dict[str, Any]:
    """The score row of a design attempt."""
    return {
        "env_id": s.outcome.env_id,
        "skill": s.outcome.skill,
        "source": "designed",
        "accepted": s.outcome.valid,
        "failed": False,
        "failure": s.outcome.failure_kind,
        "progress": None if s.outcome.valid else s.outcome.progress,
        "win_rate": s.outcome.win_rate,
        "hinted_win_rate": s.outcome.hinted_win_rate,
        "regret": s.outcome.regret,
        "reward": s.reward,
        "raw_reward": s.raw_reward,
        "trained_raw_reward": s.trained_raw,
        "slot": s.attempt.slot,
        "attempt": s.attempt.attempt,
        "strategy": s.attempt.strategy,
        "parent": s.attempt.parent_id,
        "directive": s.attempt.directive,
        **design_flags(s.attempt),
        "checks": player_checks(s.attempt),
    }


def _failed_row(a: DesignAttempt) -> dict[str, Any]:
    """The score row of an attempt that failed on our side: counted, never rewarded."""
    return {
        "env_id": a.env_id,
        "skill": a.skill,
        "source": "designed",
        "accepted": False,
        "failed": True,
        "failure": a.failure_kind,
        "failure_reason": a.failure_reason,
        "progress": None,
        "win_rate": None,
        "hinted_win_rate": None,
        "regret": None,
        "reward": None,
        "raw_reward": None,
        "trained_raw_reward": None,
        "slot": a.slot,
        "attempt": a.attempt,
    }


STAGE = Stage("score", sections=("scoring", "evaluation"), run=score_round)
