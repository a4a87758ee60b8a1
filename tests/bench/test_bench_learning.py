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
    import importlib.util
    import sys

    from tests.bench.runner import REPO

    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location("bench_learning", REPO / "bench" / "learning.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report():
    """bench/learning_report.py, as bench/learning.py imports it."""
    import importlib

    _learning()
    return importlib.import_module("learning_report")


def test_the_arms_are_compared_across_seeds_with_paired_intervals():
    bench = _report()

    def rows(returns: list[float]) -> list[dict[str, float | int]]:
        return [
            {"round": n, "heldout_return": r, "heldout_win_rate": 0.0, "reasoning_gym": None}
            for n, r in enumerate(returns)
        ]

    runs = {
        "spade": {"0": rows([0.1, 0.3]), "1": rows([0.2, 0.5]), "2": rows([0.0, 0.4])},
        "pool": {"0": rows([0.1, 0.2]), "1": rows([0.2, 0.3]), "2": rows([0.0, 0.1])},
    }
    comp = bench.comparison(runs)
    assert comp["seeds"] == ["0", "1", "2"]
    last = comp["heldout_return"]["last"]
    assert last["spade"]["values"] == [0.3, 0.5, 0.4] and last["pool"]["values"] == [0.2, 0.3, 0.1]
    assert last["spade_minus_pool"]["values"] == pytest.approx([0.1, 0.2, 0.3])
    lo, hi = last["spade_minus_pool"]["interval"]
    assert 0.1 - 1e-9 <= lo <= 0.2 <= hi <= 0.3 + 1e-9  # within the paired differences seen
    every = comp["heldout_return"]["all_rounds"]["spade"]
    assert every["mean"] == pytest.approx((0.2 + 0.35 + 0.2) / 3)
    assert comp["reasoning_gym"]["last"]["spade"] == {"values": [], "mean": None, "interval": None}
    means = bench.per_round_means(runs["spade"])
    assert means[1]["heldout_return_interval"][0] <= means[1]["heldout_return"]
    assert "0.400 [" in bench.with_interval(last["spade"])


def test_a_partial_result_compares_only_seeds_both_arms_have_run():
    """What the bench writes after each campaign: the runs so far, marked incomplete, with no
    paired comparison for a seed whose pool arm has not run yet."""
    import argparse

    bench = _learning()
    args = argparse.Namespace(
        quick=False, config="c.yaml", rounds=1, seeds=[0, 1], rg_size=1, set=[], model=None
    )
    row = {"round": 0, "heldout_return": 0.25, "heldout_win_rate": 0.0, "reasoning_gym": None}
    spade_row = row | {"designed_episodes": 4, "pool_episodes": 4}
    runs = {"spade": {"0": [spade_row], "1": [spade_row]}, "pool": {"0": [row]}}
    data = bench.results(args, [], {}, runs, None, done=False)
    assert data["complete"] is False and data["comparison"]["seeds"] == ["0"]
    assert data["designed_share"] == 0.5
    assert data["means"]["spade"][0]["heldout_return"] == 0.25


def test_each_arm_spends_the_sum_over_its_rounds_per_seed():
    bench = _report()
    row = {"designed_episodes": 4, "pool_episodes": 6, "agent_updates": 1, "agent_tokens": 90,
           "designer_updates": 1, "designer_tokens": 300}  # fmt: skip
    unknown = row | {"designer_tokens": None}  # a stage that did not commit
    spent = bench.spent({"0": [row, row], "1": [row, unknown]})
    assert spent["episodes"] == {"values": [20, 20], "mean": 20}
    assert spent["agent_tokens"] == {"values": [180, 180], "mean": 180}
    assert spent["designer_tokens"] == {"values": [600, None], "mean": 600}


def test_both_arms_train_the_agent_on_as_many_environments():
    """The SPADE arm may play more environments than it has slots (every accepted sample, a
    pool game beside them), but its agent update is matched to the pool arm's."""
    import importlib.util
    import sys

    from spade.config import load_config
    from tests.bench.runner import REPO

    sys.path.insert(0, str(REPO / "bench"))  # the script imports its bench/ neighbours
    spec = importlib.util.spec_from_file_location("bench_learning", REPO / "bench" / "learning.py")
    assert spec is not None and spec.loader is not None
    learning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(learning)
    spade, pool = (load_config(REPO / "configs" / "demo-cpu.yaml", learning.arm_overrides(arm, 2))
                   for arm in ("spade", "pool"))  # fmt: skip
    assert spade.training.agent_envs_per_update == pool.training.agent_envs_per_update == 2
    assert (spade.run.env_source, spade.run.min_envs, spade.run.pool_envs_min) == ("designed", 2, 1)
    assert (pool.run.env_source, pool.run.pool_envs_min) == ("pool", 0)
