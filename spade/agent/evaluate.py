"""Hinted and unhinted plays of accepted environments, and the regret they imply.

Play ``i`` of both groups uses instance seed ``base + i``, so hinted and unhinted plays meet
the same instances (paired) as far as both groups reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from spade.agent.rollout import EpisodeJob, RolloutSettings, run_episodes
from spade.agent.trajectory import Trajectory
from spade.config import CampaignConfig
from spade.curriculum.regret import get_regret_estimator, win_rate
from spade.inference.base import Backend
from spade.sandbox.policy import SandboxPolicy

EnvSource = Literal["designed", "pool"]
"""Where an environment came from: the designer wrote it, or it was drawn from the fixed pool
(``run.env_pool``); pool environments are played and trained on, never rewarded to the
designer."""


@dataclass(frozen=True)
class EnvSpec:
    """An accepted environment to evaluate."""

    env_id: str
    code: str
    skill: str
    hint: str | None
    tool_use: bool = False
    source: EnvSource = "designed"


@dataclass
class EnvEvaluation:
    """One environment's plays and the numbers the curriculum needs."""

    env_id: str
    skill: str
    hinted_returns: list[float]
    unhinted_returns: list[float]
    win_rate: float  # unhinted
    hinted_win_rate: float | None  # None without hinted plays (no hint): unknown, not 0
    regret: float
    failed_plays: int
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)
    source: EnvSource = "designed"

    def summary(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "trajectories"}


def rollout_settings(cfg: CampaignConfig) -> RolloutSettings:
    ev = cfg.evaluation
    return RolloutSettings(
        max_turns=ev.max_turns,
        temperature=ev.temperature,
        max_tokens_per_turn=ev.max_tokens_per_turn,
        max_context_tokens=cfg.model.max_context_tokens,
        max_parallel=ev.max_parallel_episodes,
        seed=cfg.seed,
        action_format=ev.action_format,
        reward_range=(cfg.sandbox.verify.reward_min, cfg.sandbox.verify.reward_max),
    )


def evaluation_jobs(envs: list[EnvSpec], cfg: CampaignConfig) -> list[EpisodeJob]:
    ev = cfg.evaluation
    jobs = []
    for env in envs:
        for i in range(ev.unhinted_plays):
            jobs.append(EpisodeJob(env.env_id, env.code, ev.seed + i, None, env.tool_use))
        if env.hint:
            for i in range(ev.hinted_plays):
                jobs.append(EpisodeJob(env.env_id, env.code, ev.seed + i, env.hint, env.tool_use))
    return jobs


async def evaluate_envs(
    backend: Backend, envs: list[EnvSpec], cfg: CampaignConfig, policy: SandboxPolicy
) -> list[EnvEvaluation]:
    """Play every environment hinted and unhinted; one evaluation per environment, in order."""
    trajectories = await run_episodes(
        backend, evaluation_jobs(envs, cfg), rollout_settings(cfg), policy=policy
    )
    estimator = get_regret_estimator(cfg.scoring.regret_estimator)
    threshold = cfg.evaluation.success_threshold
    out = []
    for env in envs:
        mine = [t for t in trajectories if t.env_id == env.env_id]
        hinted = [t for t in mine if t.hinted]
        plain = [t for t in mine if not t.hinted]
        h_ret = [t.episode_return() for t in hinted]
        u_ret = [t.episode_return() for t in plain]
        out.append(
            EnvEvaluation(
                env_id=env.env_id,
                skill=env.skill,
                hinted_returns=h_ret,
                unhinted_returns=u_ret,
                win_rate=win_rate([t.success(threshold) for t in plain]),
                hinted_win_rate=(
                    win_rate([t.success(threshold) for t in hinted]) if hinted else None
                ),
                regret=estimator(h_ret, u_ret),
                failed_plays=sum(t.failure is not None for t in mine),
                trajectories=mine,
                source=env.source,
            )
        )
    return out
