"""A multi-rank training job on local disk: what the training stage hands the ranks it launches
(:mod:`spade.training.launch`) and what rank 0 hands back.

A job folder holds ``job.json`` (the resolved campaign config, the role, the parent checkpoint,
where the new checkpoint goes, the rank count), ``samples.jsonl`` (every sample of the batch,
advantages already computed on the whole batch), ``logs/rank-<r>.log`` (each rank's stdout and
stderr), ``logs/rank-<r>.failed`` (when a rank raised, on the node's monotonic clock, and its
traceback), ``logs/launcher.log`` and, once rank 0 has saved the checkpoint, ``result.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from spade.config import CampaignConfig
from spade.errors import ConfigError

__all__ = ["JobResult", "TrainJob", "read_job", "read_result", "shard", "write_job"]

Role = Literal["agent", "designer"]

JOB, SAMPLES, RESULT, LOGS = "job.json", "samples.jsonl", "result.json", "logs"


@dataclass(frozen=True)
class TrainJob:
    """One GRPO update of ``role`` from ``parent`` (None: the configured base model) by
    ``config.training.ranks`` processes; the checkpoint goes under ``checkpoint_root``."""

    config: CampaignConfig
    role: Role
    parent: str | None
    checkpoint_root: str
    samples: list[Any]  # TrainSample, advantages set


@dataclass(frozen=True)
class JobResult:
    """One update as a process took it (:func:`spade.training.run.update_from_parent`), and
    what rank 0 writes after saving: the step's metrics (over all ranks) and the checkpoint."""

    metrics: dict[str, float | int]
    checkpoint: str  # its URI (rank 0 wrote it; every rank is told)
    kind: str  # "full" or "lora"
    rank: int = 0
    world_size: int = 1


def shard[T](items: Sequence[T], rank: int, world: int) -> list[T]:
    """Rank ``rank``'s contiguous slice of ``items``: near-equal sizes (the first ``len % world``
    ranks get one more), every item in exactly one shard, in order."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in a world of {world}")
    size, extra = divmod(len(items), world)
    start = rank * size + min(rank, extra)
    return list(items[start : start + size + (1 if rank < extra else 0)])


def write_job(folder: Path, job: TrainJob) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOGS).mkdir(exist_ok=True)
    head = {
        "config": job.config.model_dump(mode="json"),
        "role": job.role,
        "parent": job.parent,
        "checkpoint_root": job.checkpoint_root,
    }
    (folder / JOB).write_text(json.dumps(head), encoding="utf-8")
    lines = (json.dumps(asdict(s)) for s in job.samples)  # JSON floats round-trip exactly
    (folder / SAMPLES).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def read_job(folder: Path) -> TrainJob:
    """The job in ``folder``; ConfigError when it is unreadable or malformed."""
    from spade.training.samples import TrainSample

    try:
        head = json.loads((folder / JOB).read_text(encoding="utf-8"))
        rows = (folder / SAMPLES).read_text(encoding="utf-8").splitlines()
        samples = [TrainSample(**json.loads(row)) for row in rows if row.strip()]
        config = CampaignConfig.model_validate(head["config"])
        role = head["role"]
        if role not in ("agent", "designer"):
            raise ValueError(f"role {role!r}")
        return TrainJob(config, role, head["parent"], str(head["checkpoint_root"]), samples)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a job we cannot train from
        raise ConfigError(f"training job {folder} is unreadable: {exc!r}") from exc


def write_result(folder: Path, result: JobResult) -> None:
    tmp = folder / (RESULT + ".tmp")
    tmp.write_text(json.dumps(asdict(result)), encoding="utf-8")
    tmp.replace(folder / RESULT)  # the stage never reads half a result


def read_result(folder: Path) -> JobResult | None:
    """Rank 0's result, None when it wrote none."""
    path = folder / RESULT
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return JobResult(dict(data["metrics"]), str(data["checkpoint"]), str(data["kind"]))


def rank_log(folder: Path, rank: int) -> Path:
    return folder / LOGS / f"rank-{rank}.log"


def failure_marker(folder: Path, rank: int) -> Path:
    return folder / LOGS / f"rank-{rank}.failed"
