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
    """Cores (all and usable), Python, kernel, architecture and CPU model of this machine, and
    whether its cores multiply bf16 in hardware (without, bf16 runs tens of times slower: two
    kinds of machine give timings that are not comparable)."""
    from spade.inference.models import cpu_has_native_bf16

    try:  # not Linux, or /proc hidden: neither the model nor its flags are known
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return {
        "nproc": os.cpu_count(),
        "nproc_available": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpu": _cpu_model(cpuinfo),
        "native_bf16": cpu_has_native_bf16(cpuinfo),
    }


def _cpu_model(cpuinfo: str) -> str | None:
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
             if line.startswith("model name")]  # fmt: skip
    return names[0] if names else None


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON, creating the folder; atomically (a temporary file
    renamed over ``path``), so a run killed while writing leaves the last whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
