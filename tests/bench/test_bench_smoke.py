"""Smoke test of the sandbox benchmark: it runs end to end and writes its three sections."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.sandbox
def test_sandbox_bench_quick_writes_three_sections(tmp_path: Path) -> None:
    out = tmp_path / "sandbox.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "sandbox.py"), "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(out.read_text())
    assert data["machine"]["nproc"] > 0 and data["machine"]["timestamp"]

    start = data["start_latency"]
    for key in ("jailed_start_close", "plain_host_python", "plain_jail_python"):
        assert start[key]["median"] > 0 and start[key]["p90"] > 0
    assert start["ratio_vs_host_python"] > 0 and start["ratio_vs_jail_python"] > 0

    step = data["step_overhead"]
    for key in ("in_process", "plain_pipe_echo", "jailed"):
        assert step[key]["median"] > 0 and step[key]["n"] > 0

    runs = data["verify_throughput"]["runs"]
    assert [r["workers"] for r in runs] == [1, 2, 4]
    for run in runs:
        assert run["verifications"] > 0 and run["per_second"] > 0 and run["speedup"] > 0
