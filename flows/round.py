"""One SPADE round as a Prefect flow: design -> evaluate -> score (first cut of issue 5, item 2).

Each task is a thin wrapper over a plain ``spade`` function. Every task is cached on its inputs,
its own source and the source of the ``spade`` modules it runs (so a changed stage recomputes and
an unchanged one comes back ``Cached``), and persists its result (pickled: the results are
dataclasses) under the campaign's storage root, so a re-run of the same round with the same
inputs skips the stages that already finished.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import INPUTS, TASK_SOURCE, CachePolicy
from prefect.context import TaskRunContext
from prefect.tasks import exponential_backoff

from spade.agent.evaluate import EnvEvaluation, EnvSpec, evaluate_envs
from spade.config import CampaignConfig, ScoringConfig
from spade.curriculum.memory import MemoryRecord
from spade.designer.corpus import Corpus
from spade.designer.designer import DesignAttempt, design_batch
from spade.errors import ConfigError
from spade.inference.factory import open_backend
from spade.sandbox.policy import load_policy
from spade.scoring import ScoredAttempt, memory_records, score
from spade.storage import code_version
from spade.workflows import load_memory

RESULTS_DIR = "prefect-results"

# Timeouts (seconds) per stage; generous: they stop a hung stage, not a slow one.
DESIGN_TIMEOUT_S = 2 * 3600
EVALUATE_TIMEOUT_S = 4 * 3600
SCORE_TIMEOUT_S = 10 * 60

# Retries for the inference-bound stages (the model server may drop a connection or restart).
INFERENCE_RETRIES = 2
INFERENCE_BACKOFF = exponential_backoff(backoff_factor=10)  # 10 s, 20 s, ...


@dataclass(kw_only=True)
class StageCode(CachePolicy):
    """Cache-key part: the source of the ``spade`` modules a stage runs (``code_version``).

    ``TASK_SOURCE`` only sees the thin task body; this makes a change in the library code
    behind a stage recompute that stage, and only that stage.
    """

    modules: tuple[str, ...] = ()  # module names (policies get copied; modules cannot be)

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        if not self.modules:
            return None
        return code_version(*(importlib.import_module(m) for m in self.modules))


DESIGN_CODE = StageCode(
    modules=(
        "spade.designer.designer",
        "spade.designer.extract",
        "spade.designer.prompts",
        "spade.designer.skills",
        "spade.verify.checks",
        "spade.verify.episodes",
        "spade.verify.static",
        "spade.verify.verifier",
        "spade.curriculum.memory",
    )
)
EVALUATE_CODE = StageCode(
    modules=(
        "spade.agent.evaluate",
        "spade.agent.rollout",
        "spade.agent.trajectory",
        "spade.agent.actions",
        "spade.agent.prompts",
        "spade.curriculum.regret",
    )
)
SCORE_CODE = StageCode(
    modules=("spade.scoring", "spade.curriculum.rewards", "spade.curriculum.memory")
)


@dataclass
class RoundScores:
    """What the score stage returns."""

    scored: list[ScoredAttempt]
    ema: dict[str, float]
    memory_records: list[MemoryRecord]


@dataclass
class RoundResult:
    """Everything a round produced, as plain data."""

    round_index: int
    attempts: list[DesignAttempt]
    evaluations: list[EnvEvaluation]
    scored: list[ScoredAttempt] = field(default_factory=list)
    ema: dict[str, float] = field(default_factory=dict)
    memory_records: list[MemoryRecord] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Counts and per-environment numbers (no trajectories, no code)."""
        return {
            "round": self.round_index,
            "attempts": len(self.attempts),
            "accepted": sum(a.accepted for a in self.attempts),
            "environments": [e.summary() for e in self.evaluations],
            "designer_rewards": [
                {"env_id": s.outcome.env_id, "skill": s.outcome.skill, "reward": s.reward}
                for s in self.scored
            ],
        }


def results_path(config: CampaignConfig) -> Path:
    """Where the round's persisted task results live: ``<storage.root>/<name>/prefect-results``.

    Local folders only for now (``file://`` accepted); an ``s3://`` root needs a saved
    ``RemoteFileSystem`` block, which arrives with the object-store integration.
    """
    root = config.storage.root
    if root.startswith("file://"):
        root = root[len("file://") :]
    elif "://" in root:
        raise ConfigError(
            f"storage.root {root!r}: the round flow keeps results on a local path for now"
        )
    return Path(root).expanduser().resolve() / config.name / RESULTS_DIR


def result_storage(config: CampaignConfig) -> Path:
    """Prefect result storage for the round's tasks (a ``Path`` needs no saved block)."""
    path = results_path(config)
    path.mkdir(parents=True, exist_ok=True)
    return path


def accepted_specs(attempts: list[DesignAttempt]) -> list[EnvSpec]:
    """The environments to evaluate: the accepted designs, in order."""
    return [
        EnvSpec(a.env_id, a.code, a.skill, a.hint, a.tool_use)
        for a in attempts
        if a.accepted and a.code is not None and a.env_id is not None
    ]


@task(
    name="design",
    task_run_name="design-r{round_index}",
    retries=INFERENCE_RETRIES,
    retry_delay_seconds=INFERENCE_BACKOFF,
    retry_jitter_factor=0.5,
    timeout_seconds=DESIGN_TIMEOUT_S,
    cache_policy=INPUTS + TASK_SOURCE + DESIGN_CODE,
    persist_result=True,
    result_serializer="pickle",
)
async def design(config: CampaignConfig, round_index: int) -> list[DesignAttempt]:
    """Sample grounding documents and design one batch (verified and hinted)."""
    policy = load_policy(config.sandbox.policy_path)
    corpus = Corpus.load(config.corpus)
    memory = load_memory(config)
    async with open_backend(config) as backend:
        return await design_batch(backend, corpus, memory, config, policy, regeneration=round_index)


@task(
    name="evaluate",
    task_run_name="evaluate-r{round_index}",
    retries=INFERENCE_RETRIES,
    retry_delay_seconds=INFERENCE_BACKOFF,
    retry_jitter_factor=0.5,
    timeout_seconds=EVALUATE_TIMEOUT_S,
    cache_policy=INPUTS + TASK_SOURCE + EVALUATE_CODE,
    persist_result=True,
    result_serializer="pickle",
)
async def evaluate(
    config: CampaignConfig, envs: list[EnvSpec], round_index: int
) -> list[EnvEvaluation]:
    """Hinted and unhinted plays of the accepted environments."""
    if not envs:
        return []
    policy = load_policy(config.sandbox.policy_path)
    async with open_backend(config) as backend:
        return await evaluate_envs(backend, envs, config, policy)


@task(
    name="score",
    task_run_name="score-r{round_index}",
    timeout_seconds=SCORE_TIMEOUT_S,
    cache_policy=INPUTS + TASK_SOURCE + SCORE_CODE,
    persist_result=True,
    result_serializer="pickle",
)
def score_round(
    scoring: ScoringConfig,
    attempts: list[DesignAttempt],
    evaluations: list[EnvEvaluation],
    round_index: int,
    ema: dict[str, float] | None = None,
) -> RoundScores:
    """Designer rewards for every attempt, the updated EMA, and the memory records."""
    scored, new_ema = score(attempts, evaluations, scoring, ema)
    return RoundScores(scored, new_ema, memory_records(attempts, evaluations, round_index))


@flow(
    name="spade-round",
    flow_run_name="{config.name}-round-{round_index}",
    persist_result=False,
)
async def round_flow(config: CampaignConfig, round_index: int = 0) -> RoundResult:
    """One self-play round: design a batch, evaluate the accepted designs, score them."""
    storage = result_storage(config)

    attempts = await design.with_options(result_storage=storage)(config, round_index)
    envs = accepted_specs(attempts)
    evaluations = await evaluate.with_options(result_storage=storage)(config, envs, round_index)
    scores = score_round.with_options(result_storage=storage)(
        config.scoring, attempts, evaluations, round_index
    )
    return RoundResult(
        round_index=round_index,
        attempts=attempts,
        evaluations=evaluations,
        scored=scores.scored,
        ema=scores.ema,
        memory_records=scores.memory_records,
    )


__all__ = [
    "RoundResult",
    "RoundScores",
    "StageCode",
    "accepted_specs",
    "design",
    "evaluate",
    "result_storage",
    "results_path",
    "round_flow",
    "score_round",
]
