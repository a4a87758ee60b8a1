"""Run a benchmark script as a user does (``python bench/<script> ...`` from the checkout) and
read the JSON it writes; a failed run fails the test with the ends of its output."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str, out: Path, timeout: float) -> Any:
    """``bench/<script> <args> --out <out>``: the JSON written to ``out``.

    The script runs in a process group of its own, killed whole however the test ends: a
    benchmark's workers (a configuration's process, a llama.cpp server) outlived a timed-out
    test before and slowed every test after it in the slow suite."""
    cmd = [sys.executable, str(REPO / "bench" / script), *args, "--out", str(out)]
    with subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    ) as proc:  # fmt: skip
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        finally:
            _kill_group(proc.pid)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-5000:]
    return json.loads(out.read_text())


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # gone already: all of it exited
        os.killpg(pgid, signal.SIGKILL)


def bench_module(stem: str) -> ModuleType:
    """``bench/<stem>.py`` imported as its script imports its neighbours (bench/ on the path:
    it is not a package), registered under ``stem``."""
    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location(stem, REPO / "bench" / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(stem, module)
    spec.loader.exec_module(module)
    return module
