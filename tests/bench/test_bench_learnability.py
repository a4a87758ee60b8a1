"""The learnability check (bench/learnability.py): its task family, scorer and paired test, and a
``--quick`` run end to end on the real chain (llama.cpp serving SmolLM2, GRPO updates, GGUF
publishing) that writes every figure its table and plot show."""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench.runner import bench_module, run_bench


def _task() -> ModuleType:
    return bench_module("learnability_task")


def test_items_are_seeded_per_stream_and_scored_on_the_last_box():
    task = _task()
    first = task.items("heldout", (3, 2), 5, seed=0)
    assert first == task.items("heldout", (3, 2), 5, seed=0)  # deterministic
    assert first != task.items("train", (3, 2), 5, seed=0)  # streams never share items
    assert task.items("heldout", (3, 2), 2, seed=0, start=3) == first[3:]
    assert all(len(i.terms) == 3 and all(10 <= t <= 99 for t in i.terms) for i in first)
    item = task.Item("k", (1200, 34))
    assert "1200 + 34" in item.question and item.answer == 1234
    assert task.score(" 1,234.\n", item) == (True, True)
    assert task.score("1235", item) == (True, False)
    assert task.score("so \\boxed{1,234}", item) == (True, True)
    assert task.score("\\boxed{5} then \\boxed{1234}", item) == (True, True)  # the last box
    assert task.score("1200 + 34 = 1234", item) == (False, False)  # prose: not read
    assert task.score("-", item) == (False, False)


def test_the_calibrated_level_is_in_the_band_nearest_its_middle():
    task = _task()
    assert task.calibrated_level({(2, 1): 0.9, (2, 2): 0.55, (3, 2): 0.4}) == (3, 2)
    assert task.calibrated_level({(2, 1): 0.9, (2, 2): 0.7}) == (2, 2)  # none inside: nearest


def test_mcnemar_is_the_exact_two_sided_binomial_test_of_the_discordant_pairs():
    task = _task()
    before = [False] * 10 + [True] * 2 + [True] * 5
    after = [True] * 10 + [False] * 2 + [True] * 5
    got = task.mcnemar(before, after)
    want = 2 * sum(math.comb(12, i) for i in range(3)) / 2**12  # 2 of 12 discordant pairs
    assert got["gained"] == 10 and got["lost"] == 2 and got["p_value"] == pytest.approx(want)
    assert task.mcnemar([True], [True])["p_value"] == 1.0
    assert task.moving_average([1.0, 0.0, 1.0], 2) == [1.0, 0.5, 0.5]


@pytest.mark.slow  # ~60 s: two real updates of SmolLM2, each published to llama.cpp
def test_learnability_quick_trains_publishes_and_scores_held_out_items(
    tmp_path: Path, smol_env: Path
) -> None:
    out = tmp_path / "learnability.json"
    data = run_bench("learnability.py", "--quick", out=out, timeout=900)
    assert data["calibration"] and set(data["level"]) == {"terms", "digits"}
    points, steps = data["points"], data["steps"]
    assert [p["update"] for p in points] == [0, 2]
    for p in points:
        assert len(p["correct"]) == len(p["readable"]) == data["settings"]["heldout"]
        assert 0.0 <= p["success"] <= p["format"] <= 1.0
    assert [s["update"] for s in steps] == [1, 2]
    for s in steps:
        assert math.isfinite(s["mismatch_kl"]) and 0.0 <= s["zero_variance_groups"] <= 1.0
        assert 0.0 <= s["reward"] <= s["format"] <= 1.0
    assert 0.0 <= data["p_value"] <= 1.0 and data["p_value"] == data["result"]["p_value"]
    assert out.with_suffix(".png").stat().st_size > 0
