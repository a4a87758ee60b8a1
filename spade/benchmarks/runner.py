"""Playing a held-out suite: its seeded subset, one unhinted play per task, scored per item.

A play that failed on the inference side (``Trajectory.failed``) scores nothing: it is counted
(``failed_plays``) and left out of the suite's mean; past ``evaluation.max_failed_share`` of
the suite's plays :func:`play_suite` raises InferenceError (the heldout stage is retried).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from spade.agent.evaluate import check_failed_share, rollout_settings
from spade.agent.rollout import EpisodeJob, run_episodes
from spade.benchmarks.base import HeldoutTask, Suite, get_suite, suite_score
from spade.config import CampaignConfig, HeldoutSuiteConfig
from spade.inference.base import Backend
from spade.records import Trajectory
from spade.sandbox.policy import SandboxPolicy
from spade.stats import bootstrap_interval, interval_json


@dataclass
class SuiteResult:
    """One suite's plays: a row per task (score, status, failure) and the suite's mean."""

    name: str
    rows: list[dict[str, Any]]
    transcripts: list[dict[str, Any]]

    @property
    def score(self) -> float:
        """Mean score of the plays that did not fail on the inference side."""
        return suite_score([r["score"] for r in self.rows if r["status"] != "inference_failed"])

    def summary(self) -> dict[str, Any]:
        scores = [r["score"] for r in self.rows if r["status"] != "inference_failed"]
        return {
            "score": self.score,
            "score_interval": interval_json(bootstrap_interval(scores)),
            "tasks": len(self.rows),
            "failed_plays": sum(1 for r in self.rows if r["status"] == "inference_failed"),
        }


def suite_tasks(sc: HeldoutSuiteConfig) -> tuple[Suite, list[HeldoutTask]]:
    """The suite named by ``sc`` and its seeded subset of tasks."""
    suite = get_suite(sc.name)
    return suite, suite.tasks(sc.size, sc.seed, list(sc.subsets))


def _row(task: HeldoutTask, traj: Trajectory, score: float) -> dict[str, Any]:
    return {
        "suite": task.suite,
        "task_id": task.task_id,
        "score": score,
        "status": traj.status,
        "turns": len(traj.turns),
        "failure": traj.failure,
    }


async def play_suite(
    backend: Backend,
    sc: HeldoutSuiteConfig,
    cfg: CampaignConfig,
    policy: SandboxPolicy,
    prepared: tuple[Suite, list[HeldoutTask]] | None = None,
) -> SuiteResult:
    """Play every task of the suite's subset once, unhinted, and score each play
    (``prepared``: the suite and tasks :func:`suite_tasks` already built for ``sc``)."""
    suite, tasks = prepared or suite_tasks(sc)
    settings = dataclasses.replace(
        rollout_settings(cfg), max_turns=sc.max_turns or suite.default_max_turns
    )
    jobs = [EpisodeJob(t.env_id, t.code, sc.seed, None, t.tool_use) for t in tasks]
    trajectories = await run_episodes(backend, jobs, settings, policy=policy)
    check_failed_share(trajectories, cfg.evaluation.max_failed_share, f"suite {sc.name}")
    rows, transcripts = [], []
    for task, traj in zip(tasks, trajectories, strict=True):
        rows.append(_row(task, traj, suite.score(task, traj)))
        transcripts.append({"task_id": task.task_id, "messages": traj.messages})
    return SuiteResult(sc.name, rows, transcripts)
