"""The hints benchmark (bench/hints.py): what a hint source adds is the mean over games of the
paired hinted-minus-unhinted difference, a game without that source's hint adding 0."""

from __future__ import annotations

import random
from types import ModuleType

import pytest

from tests.bench.runner import bench_module


def _hints() -> ModuleType:
    return bench_module("hints")


def test_a_source_adds_the_mean_paired_difference_over_games():
    hints = _hints()
    returns = {
        "a": {"unhinted": [0.0, 0.5], "declared": [1.0, 0.5], "strategy": [0.0, 0.0]},
        "b": {"unhinted": [0.2, 0.2]},  # no hint written for b: it adds 0 for every source
    }
    got = hints.added(returns, "declared", random.Random(0), resamples=200)
    assert got["per_game"] == pytest.approx({"a": 0.5, "b": 0.0})
    assert got["mean"] == pytest.approx(0.25)
    low, high = got["interval"]
    assert 0.0 <= low <= got["mean"] <= high <= 1.0  # between the smallest and largest play diff
    worse = hints.added(returns, "strategy", random.Random(0), resamples=200)
    assert worse["per_game"]["a"] == pytest.approx(-0.25) and worse["mean"] == pytest.approx(-0.125)


def test_the_splits_are_the_demos_trainable_and_held_out_games():
    hints = _hints()
    assert not set(hints.SPLITS["tune"]) & set(hints.SPLITS["heldout"])
    assert set(hints.SPLITS["heldout"]) == {"code_breaker", "maze_walk", "sequence_oracle"}
