"""One rank of a multi-rank training stage: ``python -m spade.training.launch JOB_DIR``, started
by torchrun or DeepSpeed's launcher (:mod:`spade.training.launcher`) on every rank of the node.

Every rank sends its stdout and stderr (C++ and DeepSpeed output included) to
``JOB_DIR/logs/rank-<RANK>.log``, reads the job (:mod:`spade.training.job`) and takes the
update the in-process stage takes (:func:`spade.training.run.update_from_parent`) in the
launcher's process group: the trainer at the parent's weights steps on this rank's contiguous
shard of the batch (metrics summed over the ranks), the checkpoint is saved collectively and
written by rank 0, which then writes ``result.json``.
A rank that raises leaves its traceback in its log, and when it failed in
``logs/rank-<RANK>.failed``, and exits 1: the launcher stops the other ranks and the stage
reports the log of the rank that failed first. A rank killed by a fatal signal leaves the
Python stacks of its threads in its log (``faulthandler``).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
import traceback
from pathlib import Path

from spade.training.job import (
    failure_marker,
    rank_log,
    read_job,
    shard,
    write_result,
)

__all__ = ["main", "run_rank"]


def _log_to(path: Path) -> None:
    """Point this process's stdout and stderr (file descriptors 1 and 2) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115


def run_rank(folder: Path) -> None:
    """This rank's part of the job in ``folder`` (collective with the other ranks)."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    job = read_job(folder)
    ranks = job.config.training.ranks
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])  # the launcher's
    if world != ranks:
        raise RuntimeError(f"the job is for {ranks} ranks, the launcher started {world}")
    mine = len(shard(job.samples, rank, world))
    print(f"rank {rank}/{world}: {mine} of {len(job.samples)} samples", flush=True)
    from spade.training.run import update_from_parent

    update = update_from_parent(job.config, job.role, job.parent, job.samples, job.checkpoint_root)
    if rank == 0:
        write_result(folder, update)
    print(
        f"rank {rank}/{world}: step {update.metrics['step']}, checkpoint {update.checkpoint}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m spade.training.launch JOB_DIR", file=sys.stderr)
        return 2
    folder = Path(args[0])
    rank = int(os.environ.get("RANK", "0"))
    _log_to(rank_log(folder, rank))
    # a rank killed by a fatal signal (an abort in C++, a segfault) raises nothing: the
    # Python stacks of its threads in its log are then the only trace of where it was
    faulthandler.enable(file=sys.stderr, all_threads=True)
    try:
        run_rank(folder)
    except BaseException:  # any failure of this rank: its traceback is what the stage reports
        trace = traceback.format_exc()
        print(trace, file=sys.stderr, flush=True)
        # when it failed (the node's monotonic clock, finer than file times): the rank that
        # failed first is the cause, the others usually fail after it, their peer gone
        failure_marker(folder, rank).write_text(f"{time.monotonic_ns()}\n{trace}", "utf-8")
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
