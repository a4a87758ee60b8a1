"""What every task of the round shares: timeouts, retries, result persistence and the cache key.

Task results persist to the campaign's Prefect result storage and are cached on a key of (the
task's data inputs, the config sections the stage depends on, the source of the ``spade``
modules it runs: :mod:`spade.pipeline.keys`), plus the task's own source (``TASK_SOURCE``): a
re-run recomputes only what changed and what depends on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect.cache_policies import TASK_SOURCE, CachePolicy
from prefect.context import TaskRunContext
from prefect.tasks import exponential_backoff
from prefect.utilities.hashing import hash_objects

from spade.pipeline.keys import config_hash, stage_code_version

# Timeouts (seconds): they stop a hung stage, not a slow one.
VERIFY_TIMEOUT_S = 10 * 60
INFERENCE_TIMEOUT_S = 4 * 3600
TRAIN_TIMEOUT_S = 8 * 3600
IO_TIMEOUT_S = 30 * 60
INFERENCE_RETRIES = 2
BACKOFF = exponential_backoff(backoff_factor=10)  # 10 s, 20 s, ...


@dataclass(kw_only=True)
class StageKey(CachePolicy):
    """Cache key: the stage's config sections with the contents of the files they name, its
    library code version and its other inputs.

    ``TASK_SOURCE`` (added to it below) covers the thin task body; this covers the ``spade``
    modules behind the stage (its import closure, ``spade.pipeline.keys``) and the files it
    reads (policy, corpus, held-out environments, ...), so a stage whose code or input file
    changed recomputes.
    """

    stage: str = ""

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        config = inputs["config"]
        rest = {k: v for k, v in inputs.items() if k != "config"}
        return hash_objects(
            self.stage, config_hash(config, self.stage), stage_code_version(self.stage), rest
        )


def cached(stage: str) -> CachePolicy:
    return StageKey(stage=stage) + TASK_SOURCE


PERSIST: dict[str, Any] = {"persist_result": True, "result_serializer": "pickle"}
INFERENCE: dict[str, Any] = {
    "retries": INFERENCE_RETRIES,
    "retry_delay_seconds": BACKOFF,
    "retry_jitter_factor": 0.5,
    "timeout_seconds": INFERENCE_TIMEOUT_S,
    **PERSIST,
}
