"""Which worker ran a piece of a round's work, as stored with its records (``ran_on``).

The verify and evaluate stages fan out over the flow's task runner (threads of the flow's
process, or the worker processes of a Dask cluster). Each stores where it ran: this host and
process, plus what the caller knows about the runner (the orchestration layer adds the Dask
worker's address and name; spade itself imports neither Prefect nor Dask).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping
from typing import Any

LOCAL = {"runner": "local"}
"""What a caller that names no runner is: a plain call in this process (no task runner)."""


def ran_on(runner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"host", "pid", "thread", "runner", ...}`` of the calling thread; ``runner``: what the
    task runner says about itself (e.g. ``{"runner": "dask", "worker": <address>}``)."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "thread": threading.current_thread().name,
        **(runner if runner is not None else LOCAL),
    }
