"""Processes a test or a benchmark starts and must stop for good: a free loopback port, a
process group stopped (and whatever escaped it killed), and the system's Chromium driven by
playwright (never ``playwright install``: the browser is Debian's, see scripts/bootstrap.sh)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


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


@contextlib.contextmanager
def chromium(headless: bool = True) -> Iterator[Any]:
    """Debian's Chromium driven by PyPI's playwright (sync API); yields a ``Browser``.
    The caller checks that :data:`CHROMIUM` exists (a test skips, a benchmark stops)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=headless
        )
        try:
            yield browser
        finally:
            browser.close()
