"""Hinted and unhinted plays of accepted environments, and the regret they imply.

**Instances.** A round's plays of an environment are on instances of its own: consecutive seeds
from a digest of the campaign seed, ``evaluation.seed``, the round and the environment id
(:func:`instance_seeds`), so a game played again next round (a replay, a pool game) meets
new instances instead of the same few, and a re-run of the stage (a resume, a retry) plays the
same ones; each play records its seed (``Trajectory.seed``), so any play can be replayed
exactly. Without a round (``round=None``: the held-out set, ``spade evaluate``) the instances are
fixed, ``evaluation.seed + i``: a held-out set must be the same set every round to compare.

**Pairing.** An environment has ``evaluation.unhinted_plays`` instances (``hinted_plays``
without unhinted plays); unhinted play ``j`` plays instance ``j`` and hinted play ``j`` instance
``j mod unhinted_plays`` (:func:`play_seeds`). With the reference's 8 unhinted and 16 hinted
plays every instance is played once without the hint and twice with it; with fewer hinted plays
than unhinted only the first ``hinted_plays`` instances are shared. Every hinted play then has
an unhinted partner on its instance, and besides the regret (the configured estimator, over all
plays) each evaluation carries the paired regret: the mean over shared instances of hinted
minus unhinted return, a hinted instance's replicates averaged, with its 95% interval over the
instances (:func:`spade.curriculum.regret.paired_regret`).

Plays that failed on our side (inference errors and timeouts: :attr:`Trajectory.failed`) are
counted (``failed_plays``) and left out of the win rates and the regret, so an outage cannot
make an environment look too hard. When they are too many to trust the rest (more than
``evaluation.max_failed_share`` of an environment's plays, or every play of its hinted or
unhinted group) :func:`evaluate_envs` raises :class:`~spade.errors.InferenceError`, so the
stage fails and is retried instead of storing numbers made of an outage.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from spade.agent.rollout import EpisodeJob, OnFinished, RolloutSettings, run_episodes
from spade.config import CampaignConfig
from spade.curriculum.regret import get_regret_estimator, instance_gaps, paired_regret, win_rate
from spade.errors import InferenceError
from spade.inference.base import Backend
from spade.records import EnvEvaluation, EnvSpec, Trajectory
from spade.sandbox.policy import SandboxPolicy
from spade.stats import interval_json

SEED_SPACE = 2**32
"""Instance seeds are below this: ``reset(seed)`` may seed numpy, which takes 32 bits."""


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


def first_instance(campaign_seed: int, base: int, round: int, env_id: str) -> int:
    """The seed of ``env_id``'s first instance in round ``round`` (below :data:`SEED_SPACE`): a
    digest of all four, so rounds, environments and campaign seeds start at unrelated seeds,
    and the same four start at the same seed however often it is asked."""
    key = f"{campaign_seed}:{base}:{round}:{env_id}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big")


def instance_seeds(cfg: CampaignConfig, env_id: str, round: int | None) -> list[int]:
    """The instances ``env_id`` is played on in round ``round``, shape ``(m,)`` with ``m =
    evaluation.unhinted_plays`` (``hinted_plays`` when there are no unhinted plays): ``m``
    consecutive seeds from :func:`first_instance` (two rounds' sets meet with odds about
    ``2m / 2**32``); round None: the fixed instances ``evaluation.seed + i`` (the held-out set,
    ``spade evaluate``)."""
    ev = cfg.evaluation
    count = ev.unhinted_plays or ev.hinted_plays
    first = ev.seed if round is None else first_instance(cfg.seed, ev.seed, round, env_id)
    return [(first + i) % SEED_SPACE for i in range(count)]


def play_seeds(seeds: Sequence[int], plays: int) -> list[int]:
    """The instance seed of each of ``plays`` plays, shape ``(plays,)``, over the instances
    ``seeds`` (shape ``(m,)``): play ``j`` plays ``seeds[j mod m]``, so hinted plays go round the
    unhinted plays' instances (paired by design, see the module docstring)."""
    return [seeds[j % len(seeds)] for j in range(plays)] if seeds else []


def evaluation_jobs(
    envs: list[EnvSpec], cfg: CampaignConfig, round: int | None
) -> list[EpisodeJob]:
    """Each environment's unhinted plays, then its hinted plays (none without a hint), on
    round ``round``'s instances (:func:`instance_seeds`, :func:`play_seeds`)."""
    ev = cfg.evaluation
    jobs = []
    for env in envs:
        seeds = instance_seeds(cfg, env.env_id, round)
        for seed in play_seeds(seeds, ev.unhinted_plays):
            jobs.append(EpisodeJob(env.env_id, env.code, seed, None, env.tool_use))
        if env.hint:
            for seed in play_seeds(seeds, ev.hinted_plays):
                jobs.append(EpisodeJob(env.env_id, env.code, seed, env.hint, env.tool_use))
    return jobs


async def evaluate_envs(
    backend: Backend,
    envs: list[EnvSpec],
    cfg: CampaignConfig,
    policy: SandboxPolicy,
    *,
    round: int | None,
    finished: Mapping[int, Trajectory] | None = None,
    on_finished: OnFinished | None = None,
) -> list[EnvEvaluation]:
    """Play every environment hinted and unhinted on round ``round``'s instances (None: the
    fixed ones); one evaluation per environment, in order.

    ``finished`` / ``on_finished`` are :func:`run_episodes`'s, over :func:`evaluation_jobs`'
    indices; a finished play is reused only if it played its job's instance, hinted as the job
    is. InferenceError when an environment's failed plays pass the threshold (see the module
    docstring).
    """
    jobs = evaluation_jobs(envs, cfg, round)
    trajectories = await run_episodes(
        backend,
        jobs,
        rollout_settings(cfg),
        policy=policy,
        finished=reusable(jobs, finished or {}),
        on_finished=on_finished,
    )
    for env in envs:
        check_failed_share(
            [t for t in trajectories if t.env_id == env.env_id],
            cfg.evaluation.max_failed_share,
        )
    return [_evaluation(env, trajectories, cfg) for env in envs]


def reusable(
    jobs: Sequence[EpisodeJob], finished: Mapping[int, Trajectory]
) -> dict[int, Trajectory]:
    """The ``finished`` plays (by job index) that played their job: its environment and
    instance, hinted as it is. Any other (an index past the jobs, a play stored when instances
    were drawn otherwise) is played again rather than counted as an instance it did not play."""
    return {
        i: t
        for i, t in finished.items()
        if i < len(jobs)
        and (t.env_id, t.seed, t.hinted) == (jobs[i].env_id, jobs[i].seed, jobs[i].hint is not None)
    }


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
    gaps = instance_gaps(
        [(t.seed, r) for t, r in zip(hinted, h_ret, strict=True)],
        [(t.seed, r) for t, r in zip(plain, u_ret, strict=True)],
    )
    paired = paired_regret(gaps)
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
        paired_regret=paired[0] if paired else None,
        paired_regret_interval=interval_json(paired[1] if paired else None),
        paired_instances=len(gaps),
        resumed_plays=sum(t.resumed > 0 for t in mine),
    )
