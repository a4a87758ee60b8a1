"""Hinted and unhinted plays of accepted environments, and the regret they imply.

Play ``i`` of both groups uses instance seed ``base + i``, so hinted and unhinted plays meet
the same instances (paired) as far as both groups reach.

Plays that failed on our side (inference errors and timeouts: :attr:`Trajectory.failed`) are
counted (``failed_plays``) and left out of the win rates and the regret, so an outage cannot
make an environment look too hard. When they are too many to trust the rest (more than
``evaluation.max_failed_share`` of an environment's plays, or every play of its hinted or
unhinted group) :func:`evaluate_envs` raises :class:`~spade.errors.InferenceError`, so the
stage fails and is retried instead of storing numbers made of an outage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spade.agent.rollout import EpisodeJob, OnFinished, RolloutSettings, run_episodes
from spade.config import CampaignConfig
from spade.curriculum.regret import get_regret_estimator, win_rate
from spade.errors import InferenceError
from spade.inference.base import Backend
from spade.records import EnvEvaluation, EnvSpec, Trajectory
from spade.sandbox.policy import SandboxPolicy


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
    backend: Backend,
    envs: list[EnvSpec],
    cfg: CampaignConfig,
    policy: SandboxPolicy,
    *,
    finished: Mapping[int, Trajectory] | None = None,
    on_finished: OnFinished | None = None,
) -> list[EnvEvaluation]:
    """Play every environment hinted and unhinted; one evaluation per environment, in order.

    ``finished`` / ``on_finished`` are :func:`run_episodes`'s, over :func:`evaluation_jobs`'
    indices. InferenceError when an environment's failed plays pass the threshold (see the
    module docstring).
    """
    trajectories = await run_episodes(
        backend,
        evaluation_jobs(envs, cfg),
        rollout_settings(cfg),
        policy=policy,
        finished=finished,
        on_finished=on_finished,
    )
    for env in envs:
        check_failed_share(
            [t for t in trajectories if t.env_id == env.env_id],
            cfg.evaluation.max_failed_share,
        )
    return [_evaluation(env, trajectories, cfg) for env in envs]


def check_failed_share(
    plays: Sequence[Trajectory], max_share: float, what: str | None = None
) -> None:
    """InferenceError when more than ``max_share`` of ``plays`` (one environment's, or what
    ``what`` names) failed on our side, or every play of its hinted or of its unhinted group
    did (no measure left)."""
    failed = [t for t in plays if t.failed]
    if not failed:
        return
    groups = {
        "unhinted": [t for t in plays if not t.hinted],
        "hinted": [t for t in plays if t.hinted],
    }
    lost = [name for name, group in groups.items() if group and all(t.failed for t in group)]
    share = len(failed) / len(plays)
    if share > max_share or lost:
        first = failed[0].failure or {}
        why = (
            f"every {' and '.join(lost)} play failed"
            if lost
            else f"share {share:.2f} > {max_share}"
        )
        raise InferenceError(
            f"{len(failed)} of {len(plays)} plays of {what or plays[0].env_id} failed on the"
            f" inference side ({why}; evaluation.max_failed_share), e.g. {first.get('kind')}:"
            f" {first.get('reason')}"
        )


def _evaluation(env: EnvSpec, trajectories: list[Trajectory], cfg: CampaignConfig) -> EnvEvaluation:
    """The numbers of one environment's plays, failed ones (our side) left out and counted."""
    estimator = get_regret_estimator(cfg.scoring.regret_estimator)
    threshold = cfg.evaluation.success_threshold
    mine = [t for t in trajectories if t.env_id == env.env_id]
    measured = [t for t in mine if not t.failed]
    hinted = [t for t in measured if t.hinted]
    plain = [t for t in measured if not t.hinted]
    h_ret = [t.episode_return() for t in hinted]
    u_ret = [t.episode_return() for t in plain]
    return EnvEvaluation(
        env_id=env.env_id,
        skill=env.skill,
        hinted_returns=h_ret,
        unhinted_returns=u_ret,
        win_rate=win_rate([t.success(threshold) for t in plain]),
        hinted_win_rate=win_rate([t.success(threshold) for t in hinted]) if hinted else None,
        regret=estimator(h_ret, u_ret),
        failed_plays=len(mine) - len(measured),
        trajectories=mine,
        source=env.source,
        env_failed_plays=sum(t.status == "env_failed" for t in measured),
    )
