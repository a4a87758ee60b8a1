"""Smoke test of the learning benchmark (``bench/learning.py --quick --sweep``): both arms run
their rounds with the scripted stand-in and a tiny policy, play the same number of unhinted
episodes per round, and the table's figures, the JSON and the PNG are written. No learning is
asserted: benchmarks report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.runner import run_bench


@pytest.mark.slow  # a bench's smoke run (44 s); its statistics are tested below, without it
@pytest.mark.sandbox
@pytest.mark.timeout(660)
def test_learning_bench_quick_runs_both_arms_and_the_sweep(tmp_path: Path) -> None:
    out, store = tmp_path / "learning.json", tmp_path / "store"
    data = run_bench(
        "learning.py", "--quick", "--sweep", "--store", str(store), out=out, timeout=600
    )
    assert data["mode"] == "quick" and data["machine"]["nproc"] > 0 and data["timestamp"]
    assert data["complete"] is True
    spade, pool = data["runs"]["spade"]["0"], data["runs"]["pool"]["0"]
    assert [r["round"] for r in spade] == [r["round"] for r in pool] == [0, 1]
    for s, p in zip(spade, pool, strict=True):  # the same agent episodes per round
        assert s["designed_episodes"] + s["pool_episodes"] == p["pool_episodes"] > 0
        assert p["designed_episodes"] == 0 and p["designer_reward"] is None
        assert s["heldout_win_rate"] is not None and p["reasoning_gym"] is not None
        assert 0.0 <= s["heldout_return"] <= 1.0 and 0.0 <= p["heldout_return"] <= 1.0
    assert 0.0 <= data["designed_share"] <= 1.0
    assert data["base"]["win_rate"] is not None  # the base weights, before any training
    assert len(data["means"]["spade"]) == len(data["means"]["pool"]) == 2
    heldout = {Path(p).name for p in data["settings"]["heldout_envs"]}
    assert heldout == {"code_breaker.py", "maze_walk.py", "sequence_oracle.py"}
    sweep = data["sweep"]
    assert len(sweep["validation"]) == 1 and not set(sweep["validation"]) & heldout
    assert sweep["best"] in sweep["results"] and "--set training.lr=" in sweep["use"]
    assert all(r["validation_return"] is not None for r in sweep["results"])
    png = out.with_suffix(".png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    spent = data["spent"]  # matched agent episodes and updates; the designer's cost is SPADE's
    assert spent["spade"]["episodes"]["mean"] == spent["pool"]["episodes"]["mean"] > 0
    assert spent["pool"]["designer_updates"]["values"] == [0]
    assert all(spent[arm]["agent_tokens"]["mean"] is not None for arm in ("spade", "pool"))

    # the same command again, on the same store: every campaign is read back, none replayed
    manifests = {p: p.stat().st_mtime_ns for p in store.rglob("manifest.json")}
    assert manifests
    again = run_bench("learning.py", "--quick", "--store", str(store), out=out, timeout=600)
    assert again["runs"] == data["runs"] and again["base"] == data["base"]
    assert {p: p.stat().st_mtime_ns for p in store.rglob("manifest.json")} == manifests


def _learning():
    """bench/learning.py loaded as the script runs (bench/ on the path for its report module)."""
    from spade.config import load_config
    from tests.bench.runner import REPO, bench_module

    learning = bench_module("learning")
    spade, pool = (load_config(REPO / "configs" / "demo-cpu.yaml", learning.arm_overrides(arm, 2))
                   for arm in ("spade", "pool"))  # fmt: skip
    assert spade.training.agent_envs_per_update == pool.training.agent_envs_per_update == 2
    assert (spade.run.env_source, spade.run.min_envs, spade.run.pool_envs_min) == ("designed", 2, 1)
    assert (pool.run.env_source, pool.run.pool_envs_min) == ("pool", 0)
