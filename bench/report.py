"""What every benchmark records beside its figures: the machine, the time, the JSON file."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from pathlib import Path
from typing import Any


def timestamp() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def machine() -> dict[str, Any]:
    """Cores (all and usable), Python, kernel and architecture of this machine."""
    return {
        "nproc": os.cpu_count(),
        "nproc_available": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "machine": platform.machine(),
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
