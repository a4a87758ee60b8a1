"""Smoke test of the dashboard benchmark (``bench/dashboard.py --quick``): two synthetic campaigns
are loaded through the data loader and served to headless Chromium (and a bare Streamlit page
for scale); every figure and ratio is written to JSON. No timing thresholds: benchmarks
report."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spade.testing.processes import CHROMIUM
from tests.bench.runner import run_bench

FIGURES = {
    "data": ("overview_cold_s", "overview_warm_s", "page_data_cold_s"),
    "page": (
        "server_start_s",
        "title_s",
        "first_load_s",
        "reload_s",
        "first_script_run_s",
        "reload_browser_cpu_s",
        "gallery_tab_s",
    ),
    "page.memory": ("rss_before_mb", "peak_rss_mb", "peak_growth_mb"),
}


@pytest.mark.slow  # ~35 s: .ci/run runs it after the default suite
@pytest.mark.timeout(330)
def test_dashboard_bench_quick_writes_figures_and_ratios(tmp_path: Path) -> None:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} missing (scripts/bootstrap.sh installs Debian's chromium)")
    data = run_bench("dashboard.py", "--quick", out=tmp_path / "x.json", timeout=300)
    assert data["machine"]["nproc"] > 0 and data["timestamp"] and data["mode"] == "quick"

    base, big = data["baseline"], data["big"]
    assert (base["rounds"], big["rounds"], big["environments"]) == (5, 50, 1000)
    for camp in (base, big):
        assert camp["data"]["rounds_seen"] == camp["rounds"]
        assert camp["store"]["files"] > 0 and camp["build_s"] > 0
        for where, keys in FIGURES.items():
            section = camp
            for part in where.split("."):
                section = section[part]
            for key in keys:
                assert section[key] > 0, (where, key, section[key])
        page = camp["page"]
        assert page["charts_drawn"] >= 10
        assert page["first_load_s"] >= page["title_s"]
        assert page["memory"]["peak_rss_mb"] >= page["memory"]["rss_before_mb"]
        assert len(page["reloads"]) == 2 and all(r["load_s"] > 0 for r in page["reloads"])

    ref = data["reference"]  # a bare Streamlit page, for scale
    assert ref["first_load_s"] > 0 and ref["reload_s"] > 0 and ref["server_start_s"] > 0

    ratios = data["ratios"]
    assert ratios["rounds"] == 10
    for key in ("overview_cold_s", "page_data_cold_s", "first_load_s", "reload_s", "peak_rss_mb"):
        assert ratios[key] > 0, key
    assert data["aim"]["page_load_under_s"] == 3.0 and isinstance(data["aim"]["meets"], bool)
