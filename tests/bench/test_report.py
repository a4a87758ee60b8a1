"""bench/report.py: what every benchmark's JSON says of the machine it ran on."""

from __future__ import annotations

from pathlib import Path

from spade.inference.models import cpu_has_native_bf16
from tests.bench.runner import bench_module


def test_the_machine_names_its_cpu_and_whether_it_has_native_bf16() -> None:
    got = bench_module("report").machine()
    assert got["nproc"] > 0 and got["nproc_available"] <= got["nproc"]
    assert got["native_bf16"] is cpu_has_native_bf16()  # timings of the two kinds differ
    names = [line for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")]  # fmt: skip
    assert got["cpu"] == (names[0].split(":", 1)[1].strip() if names else None)
