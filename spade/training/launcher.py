"""Launch a multi-rank training job (:mod:`spade.training.job`) on this node and wait for it.

``training.launcher`` picks torchrun (``python -m torch.distributed.run --nproc_per_node N``)
or DeepSpeed's launcher (``python -m deepspeed.launcher.runner``); either starts ``python -m
spade.training.launch JOB_DIR`` on ``training.ranks`` ranks with a free ``MASTER_PORT`` on
loopback, and stops the others when one rank fails. The launcher's own output goes to
``logs/launcher.log``, each rank's to ``logs/rank-<r>.log``. Any failure raises
:class:`~spade.errors.TrainingError` with the failing rank's log tail.

GPUs. When the model runs on GPUs the launcher is started with ``CUDA_VISIBLE_DEVICES`` naming
the training GPUs of :func:`spade.placement.placement` (``training.devices``, or the first
``training.ranks`` GPUs the managed vLLM server leaves free), mapped through the worker's own
``CUDA_VISIBLE_DEVICES`` when it has one (:func:`spade.placement.cuda_visible_devices`); rank
``r`` then trains on the ``r``-th of them (its ``LOCAL_RANK``). torchrun passes the variable on
to its ranks. DeepSpeed's runner reads it instead of a GPU count: given none of ``--include``,
``--exclude``, ``--num_gpus`` and ``--num_nodes``, it turns it into ``--include
localhost:<it>`` (the node's indices) and sets it again for its ranks; ``--num_gpus N`` would
make it drop the variable and start the ranks on GPUs ``0..N-1``, and it refuses
``--num_nodes`` beside an include (its own, from the variable, too), so on GPUs it gets none of
them. It takes the entries as GPU indices: a worker whose ``CUDA_VISIBLE_DEVICES`` names GPUs
by UUID needs torchrun. On the CPU the environment is left as it is and DeepSpeed's runner gets
``--num_gpus N`` (its process count there).

The launcher runs in a session of its own, stopped as a group (SIGTERM: torchrun and DeepSpeed's
runner stop their ranks) when the wait is cancelled; it does not outlive this process either
(:func:`spade.processes.guard_group`: a watcher stops it once this process is killed, and the
next launch or managed server start stops what a dead process of this machine left).

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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from spade.config import CampaignConfig, TrainingConfig
from spade.errors import ConfigError, TrainingError
from spade.placement import cuda_visible_devices, train_gpus
from spade.processes import free_port, guard_group, stop_orphaned_groups, stop_process_group
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

__all__ = ["launch_command", "rank_environment", "run_job", "train_on_ranks"]

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
STOP_GRACE_S = 30.0  # the launcher's after SIGTERM: torchrun gives its ranks as long
TAIL_CHARS = 4000
RANK_TAIL_CHARS = 2500


def launch_command(config: TrainingConfig, folder: Path, port: int, *, placed: bool) -> list[str]:
    """The launcher's command line for the job in ``folder``; ``placed``: the ranks' GPUs are
    in the launcher's ``CUDA_VISIBLE_DEVICES`` (:func:`rank_environment`)."""
    n = str(config.ranks)
    if config.launcher == "torchrun":
        head = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
        head += ["--nproc_per_node", n, "--master_addr", "127.0.0.1", "--master_port", str(port)]
        return [*head, "-m", ENTRY, str(folder)]
    # a hostfile that is never there: one on the node (/job/hostfile, DeepSpeed's default)
    # would make the runner launch over ssh and ignore CUDA_VISIBLE_DEVICES
    head = [sys.executable, "-m", "deepspeed.launcher.runner", "--hostfile", str(folder / "none")]
    # on GPUs the runner takes them from CUDA_VISIBLE_DEVICES (see the module docstring):
    # --num_gpus would make it drop the variable, --num_nodes is refused beside it
    if not placed:
        head += ["--num_gpus", n]
    head += ["--master_addr", "127.0.0.1", "--master_port", str(port)]
    return [*head, "--no_local_rank", "--module", ENTRY, str(folder)]  # LOCAL_RANK: the env


def rank_environment(
    config: TrainingConfig, gpus: Sequence[int], environ: Mapping[str, str]
) -> dict[str, str]:
    """The launcher's environment: ``environ`` without launch variables, with
    ``CUDA_VISIBLE_DEVICES`` naming ``gpus`` (the placement's training GPUs, this process's
    indices) when there are any; none (the CPU): the variable is left as it is.

    Raises:
        ConfigError: a GPU past those this process sees, or DeepSpeed's launcher with GPUs
            named by UUID (its runner reads ``CUDA_VISIBLE_DEVICES`` as indices).
    """
    env = {k: v for k, v in environ.items() if k not in LAUNCH_VARS}
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not gpus:
        return env
    visible = cuda_visible_devices(
        gpus,
        what="the training ranks' GPUs",
        fields="training.devices, or the first training.ranks GPUs vLLM leaves free",
        environ=environ,
    )
    if config.launcher == "deepspeed" and not all(d.isdigit() for d in visible.split(",")):
        raise ConfigError(
            f"training.launcher 'deepspeed' takes GPU indices, this worker names its GPUs"
            f" {visible!r} (its CUDA_VISIBLE_DEVICES is {environ['CUDA_VISIBLE_DEVICES']!r}):"
            " use training.launcher 'torchrun', or give the worker GPU indices"
        )
    env["CUDA_VISIBLE_DEVICES"] = visible
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


def run_job(config: TrainingConfig, folder: Path, gpus: Sequence[int] = ()) -> JobResult:
    """Run the job in ``folder`` (already written) on ``config.ranks`` ranks, on ``gpus`` (the
    placement's training GPUs; empty: the CPU); rank 0's result."""
    env = rank_environment(config, gpus, os.environ)
    command = launch_command(config, folder, free_port(), placed=bool(gpus))
    (folder / LOGS).mkdir(parents=True, exist_ok=True)
    where = f"GPU(s) {env['CUDA_VISIBLE_DEVICES']}" if gpus else "the CPU"
    log.info("training on %d ranks on %s: %s", config.ranks, where, " ".join(command))
    stop_orphaned_groups()  # a killed campaign's ranks would hold the GPUs
    launcher_log = folder / LOGS / "launcher.log"
    with launcher_log.open("ab") as out:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: stopped as one below
        )
        guard = guard_group(
            proc,
            what=f"training launcher ({config.launcher}, {config.ranks} ranks) of {folder}",
            grace=STOP_GRACE_S,
            log_path=launcher_log,
        )
        try:
            code = proc.wait()
        finally:  # cancelled or interrupted while waiting: no orphaned ranks keep training
            if proc.poll() is None:
                stop_process_group(proc, grace=STOP_GRACE_S)
            guard.close()
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
    success; after a failure the job's local folder is left for a look (the error names it).
    The ranks train on the placement's training GPUs (:func:`spade.placement.train_gpus`)."""
    gpus = train_gpus(cfg)  # before the job is written: a placement error leaves no folder
    folder = Path(tempfile.mkdtemp(prefix=f"spade-train-{role}-"))
    write_job(folder, TrainJob(cfg, role, parent, root, list(samples)))
    result = run_job(cfg.training, folder, gpus)
    if keep_log is not None:
        for path in sorted((folder / LOGS).glob("*.log")):
            keep_log(f"{LOGS}/{path.name}", path.read_bytes())
    shutil.rmtree(folder)
    return result
