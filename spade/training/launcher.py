"""Launch a multi-rank training job (:mod:`spade.training.job`) on this node and wait for it.

``training.launcher`` picks torchrun (``python -m torch.distributed.run --nproc_per_node N``)
or DeepSpeed's launcher (``python -m deepspeed.launcher.runner --num_nodes 1 --num_gpus N``);
either starts ``python -m spade.training.launch JOB_DIR`` on ``training.ranks`` ranks with a
free ``MASTER_PORT`` on loopback, and stops the others when one rank fails. The launcher's own
output goes to ``logs/launcher.log``, each rank's to ``logs/rank-<r>.log``. Any failure raises
:class:`~spade.errors.TrainingError` with the failing rank's log tail.

The launch variables a parent process may carry (``RANK``, ``WORLD_SIZE``, ...: a worker that
was itself started under a launcher) are dropped, so the ranks only ever join their own group.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spade.config import CampaignConfig, TrainingConfig
from spade.errors import TrainingError
from spade.processes import free_port, stop_process_group
from spade.training.job import (
    LOGS,
    JobResult,
    Role,
    TrainJob,
    failure_marker,
    rank_log,
    read_result,
    write_job,
)

__all__ = ["launch_command", "run_job", "train_on_ranks"]

log = logging.getLogger(__name__)

ENTRY = "spade.training.launch"
LAUNCH_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CROSS_RANK",
    "CROSS_SIZE",
)
TAIL_CHARS = 4000
RANK_TAIL_CHARS = 2500


def launch_command(config: TrainingConfig, folder: Path, port: int) -> list[str]:
    """The launcher's command line for the job in ``folder``."""
    n = str(config.ranks)
    if config.launcher == "torchrun":
        head = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
        head += ["--nproc_per_node", n, "--master_addr", "127.0.0.1", "--master_port", str(port)]
        return [*head, "-m", ENTRY, str(folder)]
    head = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_nodes", "1"]
    if config.devices is not None:  # DeepSpeed's runner picks GPUs by --include, not the env
        head += ["--include", f"localhost:{config.devices}"]
    else:
        head += ["--num_gpus", n]
    head += ["--master_addr", "127.0.0.1", "--master_port", str(port)]
    return [*head, "--no_local_rank", "--module", ENTRY, str(folder)]  # LOCAL_RANK: the env


def _environment(config: TrainingConfig) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if config.devices is not None and config.launcher == "torchrun":
        env["CUDA_VISIBLE_DEVICES"] = config.devices
    return env


def _tail(path: Path, chars: int = TAIL_CHARS) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:  # the process never got as far as opening it
        return "(no log)"
    return text[-chars:]


def _failed_at(marker: Path) -> int:
    """When the rank failed (its monotonic clock, written first in the marker)."""
    head = marker.read_text(encoding="utf-8").split("\n", 1)[0]
    return int(head) if head.isdigit() else sys.maxsize  # unreadable: last


def _failure(folder: Path, ranks: int, code: int) -> TrainingError:
    """The error of a failed launch: the log tail of the rank that failed first (the others
    usually fail after it, a peer having gone), else the launcher's."""
    markers = [(failure_marker(folder, r), r) for r in range(ranks)]
    failed = sorted((_failed_at(m), r) for m, r in markers if m.exists())
    if failed:
        r = failed[0][1]
        later = [other for _, other in failed[1:]]
        then = f", then rank(s) {later}" if later else ""
        path = rank_log(folder, r)
        return TrainingError(
            f"training rank {r} of {ranks} failed{then} (launcher exit {code}); {path} ends:\n"
            + _tail(path)
        )
    path = folder / LOGS / "launcher.log"
    what = f"exited {code}" if code else "exited 0 but rank 0 wrote no result"
    # no marker: a rank died by a signal (its log ends with faulthandler's stacks) or never
    # started; every rank's log tail goes with the launcher's, the cause is in one of them
    ranks_said = "".join(
        f"\n{rank_log(folder, r)} ends:\n{_tail(rank_log(folder, r), RANK_TAIL_CHARS)}"
        for r in range(ranks)
    )
    return TrainingError(
        f"training launcher {what}, no rank reported a failure; {path} ends:\n"
        + _tail(path)
        + ranks_said
    )


def run_job(config: TrainingConfig, folder: Path) -> JobResult:
    """Run the job in ``folder`` (already written) on ``config.ranks`` ranks; rank 0's result."""
    command = launch_command(config, folder, free_port())
    (folder / LOGS).mkdir(parents=True, exist_ok=True)
    log.info("training on %d ranks: %s", config.ranks, " ".join(command))
    with (folder / LOGS / "launcher.log").open("ab") as out:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_environment(config),
            start_new_session=True,  # its own process group: stopped as one below
        )
        try:
            code = proc.wait()
        finally:  # cancelled or interrupted while waiting: no orphaned ranks keep training
            if proc.poll() is None:
                stop_process_group(proc, grace=30)
    result = read_result(folder) if code == 0 else None
    if result is None:  # a rank failed, or rank 0 wrote no result
        raise _failure(folder, config.ranks, code)
    return result


def train_on_ranks(
    cfg: CampaignConfig,
    role: Role,
    parent: str | None,
    samples: Sequence[Any],
    root: str,
    keep_log: Callable[[str, bytes], object] | None = None,
) -> JobResult:
    """One update of ``role`` from checkpoint ``parent`` on ``cfg.training.ranks`` launched
    ranks, each on its shard of ``samples`` (advantages set); the checkpoint goes under
    ``root``. ``keep_log(name, data)`` gets each log (``logs/rank-<r>.log``, ...) after a
    success; after a failure the job's local folder is left for a look (the error names it)."""
    folder = Path(tempfile.mkdtemp(prefix=f"spade-train-{role}-"))
    write_job(folder, TrainJob(cfg, role, parent, root, list(samples)))
    result = run_job(cfg.training, folder)
    if keep_log is not None:
        for path in sorted((folder / LOGS).glob("*.log")):
            keep_log(f"{LOGS}/{path.name}", path.read_bytes())
    shutil.rmtree(folder)
    return result
