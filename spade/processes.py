"""Child processes the library starts and must stop for good: a free loopback port for one to
listen on, and a process group stopped (SIGTERM, a grace time, SIGKILL, and whatever escaped the
group killed too). Standard library only, psutil imported where it is needed."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from typing import Any

__all__ = ["free_port", "stop_process_group"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process_group(proc: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """SIGTERM the process's group (it was started with start_new_session=True), wait, then
    SIGKILL the group and any descendant that escaped it (found with psutil beforehand)."""
    import psutil

    try:  # the leader may be gone already
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:  # a group that ignores SIGTERM past the grace time is killed
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):  # children that outlived the leader
        os.killpg(proc.pid, signal.SIGKILL)
    _gone, alive = psutil.wait_procs(descendants, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
