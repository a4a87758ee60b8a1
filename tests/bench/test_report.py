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


def test_write_json_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    report = bench_module("report")
    out = tmp_path / "deep" / "r.json"
    report.write_json(out, {"partial": True, "steps": [1]})
    report.write_json(out, {"steps": [1, 2]})  # a run's last write replaces its partial one
    assert out.read_text() == '{\n  "steps": [\n    1,\n    2\n  ]\n}\n'
    assert [p.name for p in out.parent.iterdir()] == ["r.json"]
