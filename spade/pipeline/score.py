"""The score and remember stages: designer rewards, the EMA, and the environment memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spade.agent.evaluate import EnvEvaluation
from spade.config import CampaignConfig
from spade.curriculum.memory import EnvironmentMemory
from spade.designer.designer import DesignAttempt
from spade.pipeline.keys import fingerprint
from spade.pipeline.record import StageRecord
from spade.scoring import ScoredAttempt, memory_records, score


@dataclass
class RoundScores:
    """What the score stage returns: every attempt's reward and the updated EMA."""

    scored: list[ScoredAttempt]
    ema: dict[str, float]

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.scored]


def score_round(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
    attempts: list[DesignAttempt],
    evaluations: list[EnvEvaluation],
    ema: dict[str, float],
) -> RoundScores:
    """Designer rewards for every attempt (rejected ones included) and the new EMA."""
    scored, new_ema = score(attempts, evaluations, cfg.scoring, ema)
    rec = StageRecord(cfg, campaign_id, round, "score", {"ema": fingerprint(ema)})
    rec.write_jsonl(
        "scored.jsonl",
        [
            {
                "env_id": s.outcome.env_id,
                "skill": s.outcome.skill,
                "accepted": s.outcome.valid,
                "failure": s.outcome.failure_kind,
                "win_rate": s.outcome.win_rate,
                "hinted_win_rate": s.outcome.hinted_win_rate,
                "regret": s.outcome.regret,
                "reward": s.reward,
                "slot": s.attempt.slot,
                "attempt": s.attempt.attempt,
            }
            for s in scored
        ],
    )
    rec.write_json("ema.json", new_ema)
    rec.commit()
    return RoundScores(scored, new_ema)


def remember(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
    memory_state: dict[str, Any],
    attempts: list[DesignAttempt],
    evaluations: list[EnvEvaluation],
) -> dict[str, Any]:
    """Add this round's evaluated designs to the memory (FIFO-bounded); its new state."""
    memory = EnvironmentMemory(cfg.memory)
    memory.load_state_dict(memory_state)
    memory.extend(memory_records(attempts, evaluations, round))
    state = memory.state_dict()
    rec = StageRecord(cfg, campaign_id, round, "memory", {"memory": fingerprint(memory_state)})
    rec.write_json("memory.json", state)
    rec.commit()
    return state
