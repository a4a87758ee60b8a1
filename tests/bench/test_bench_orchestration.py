"""Smoke test of the orchestration benchmark: a scripted round from scratch (its overhead share)
and a round resumed after its held-out stage failed, both timed and written to JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade.storage import STAGES
from tests.bench.runner import run_bench


@pytest.mark.slow  # a bench's smoke run (59 s): what it runs, the flow tests check faster
@pytest.mark.sandbox
@pytest.mark.timeout(660)
def test_orchestration_bench_scripted_overhead_and_resume(tmp_path: Path) -> None:
    data = run_bench("orchestration.py", "--scripted", out=tmp_path / "x.json", timeout=600)
    assert data["machine"]["nproc"] > 0 and data["timestamp"] and data["mode"] == "scripted"

    ov = data["overhead"]
    wall, work = ov["wall_s"], ov["stage_seconds_sum_s"]
    assert wall > work > 0
    assert 0 <= ov["overhead_share"] < 1
    assert ov["overhead_share"] == pytest.approx((wall - work) / wall, abs=1e-3)
    assert list(ov["stage_seconds"]) == list(STAGES)  # every stage committed, in order
    assert set(ov["stage_status"].values()) <= {"completed", "skipped"}
    assert ov["stage_status"]["heldout"] == "completed"  # the held-out maze was played
    assert sum(ov["stage_seconds"].values()) == pytest.approx(work, abs=0.01)
    assert "Cached" not in ov["prefect"]["task_states"]  # a fresh campaign: nothing cached

    rs = data["resume"]
    failed = rs["failed_run"]
    assert failed["state"] == "Failed" and not failed["heldout_committed"]
    assert failed["stages_committed"] == list(STAGES[:-1])  # all but the held-out stage
    assert rs["scratch_wall_s"] == wall
    assert rs["resume_wall_s"] > 0  # how it compares with starting over is the bench's table
    assert rs["ratio_resume_to_scratch"] == pytest.approx(rs["resume_wall_s"] / wall, abs=1e-3)
    assert set(rs["stage_status"]) == set(STAGES) and rs["stage_status"]["heldout"] == "completed"
    assert rs["heldout_seconds"] > 0 and rs["model_requests"] > 0  # the held-out plays ran again
    if not rs["source_changed_during_run"]:  # an edit to spade/ or flows/ changes cache keys
        states = rs["prefect"]["task_states"]
        assert states.get("Completed") == 1 and states.get("Cached", 0) > 0  # only heldout ran
        assert rs["recomputed_besides_heldout"] == []


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.timeout(660)
def test_orchestration_bench_overlap_runs_both_arms(tmp_path: Path) -> None:
    """``--overlap``: the scripted campaign in sequence and overlapped, each round complete;
    the figures are the bench's to report (no speed-up is asserted)."""
    args = ("--overlap", "--rounds", "2", "--round-seconds", "2")
    data = run_bench("orchestration.py", *args, out=tmp_path / "o.json", timeout=600)
    per = data["preset_per_round"]
    assert per["inference_s"] > 0 and per["training_s"] > 0  # from the preset's sizes
    assert data["scripted_s"]["inference"] + data["scripted_s"]["training"] == pytest.approx(
        2.0, abs=0.01
    )
    seq, ov = data["arms"]
    assert (seq["overlap"], ov["overlap"]) == (0, 1) and seq["rounds"] == ov["rounds"] == 2
    for arm in (seq, ov):
        assert 0 < arm["inference_busy"] <= 1 and 0 < arm["training_busy"] <= 1
    assert data["speedup"] == pytest.approx(
        ov["rounds_per_hour"] / seq["rounds_per_hour"], abs=0.01
    )
    assert 1 < data["ideal_speedup"] <= 2
