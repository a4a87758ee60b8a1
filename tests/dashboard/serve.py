"""Serve the dashboard for real (``spade dashboard`` in its own process group) for browser
tests; the process group is always stopped."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spade.cli.dashboard import wait_ready
from spade.processes import free_port, stop_process_group
from tests.integration.prefect_live import REPO_ROOT


@contextlib.contextmanager
def served_dashboard(root: str, campaign: str, log_path: Path) -> Iterator[str]:
    """The URL of a running dashboard for ``campaign`` in the store at ``root``."""
    port = free_port()
    cmd = [sys.executable, "-m", "spade.cli", "dashboard", campaign, "--store", root]
    cmd += ["--port", str(port)]
    log = log_path.open("wb")
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:  # the server and its whole process group go, whatever the checks say
        if not wait_ready(proc, url, timeout_s=45, poll_s=0.3):
            pytest.fail(f"no dashboard at {url}: {log_path.read_text()}")
        yield url
    finally:
        stop_process_group(proc)
        log.close()
