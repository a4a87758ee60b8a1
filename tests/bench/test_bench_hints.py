"""The hints benchmark (bench/hints.py): what a hint source adds is the mean over games of the
paired hinted-minus-unhinted difference, a game without that source's hint adding 0."""

from __future__ import annotations

import random
from types import ModuleType

import pytest

from tests.bench.runner import bench_module, run_bench


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


def test_a_play_that_failed_on_our_side_leaves_its_pair_out():
    """A failed play (None: the model's request or an expired session) is no 0 charged to
    either arm: its pair is left out, and a game with no pair left adds nothing either way."""
    hints = _hints()
    returns = {
        "a": {"unhinted": [0.0, None, 0.5], "declared": [1.0, 1.0, None]},
        "b": {"unhinted": [None], "declared": [1.0]},  # no pair left
    }
    got = hints.added(returns, "declared", random.Random(0), resamples=200)
    assert got["per_game"] == pytest.approx({"a": 1.0})  # the first pair only
    assert got["mean"] == pytest.approx(1.0) and got["interval"] == pytest.approx([1.0, 1.0])


def test_the_splits_are_the_demos_trainable_and_held_out_games():
    hints = _hints()
    assert not set(hints.SPLITS["tune"]) & set(hints.SPLITS["heldout"])
    assert set(hints.SPLITS["heldout"]) == {"code_breaker", "maze_walk", "sequence_oracle"}


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.timeout(900)  # the bench's own limit
def test_hints_quick_writes_each_sources_hints_and_pairs_every_play(tmp_path, smol_env):
    """``--quick`` end to end (llama.cpp serving SmolLM2, the jail playing the tune split):
    each source's hints are written for every game, every arm has a play per seed, and what a
    source adds is the mean of its per-game differences, inside its interval."""
    hints = _hints()
    data = run_bench("hints.py", "--quick", out=tmp_path / "hints.json", timeout=900)
    tune = data["tune"]
    games = list(hints.SPLITS["tune"][:2])  # --quick: the first two
    assert set(tune["hints"]) == {"declared", "strategy", "procedure"}
    assert all(tune["hints"]["declared"][g] for g in games)  # every example declares one
    assert set(tune["returns"]) == set(games)
    for game in games:
        by_source = tune["returns"][game]
        assert len(by_source["unhinted"]) == 2  # --quick: 2 plays
        # None: a play that failed on our side (left out of the pairs)
        assert all(len(r) == 2 and all(x is None or 0.0 <= x <= 1.0 for x in r)
                   for r in by_source.values())  # fmt: skip
    for row in tune["added"].values():
        assert row["mean"] == pytest.approx(sum(row["per_game"].values()) / len(row["per_game"]))
        low, high = row["interval"]  # a percentile interval; 1e-9: sums in another order
        assert low - 1e-9 <= row["mean"] <= high + 1e-9


def test_the_coach_reads_each_example_without_its_declared_hint():
    """Every bundled example loses exactly its class's hint (a multi-line one whole: the
    switchboard's), and what is left still parses and keeps every other line in order."""
    import ast

    from spade.curriculum.memory import read_declarations
    from spade.envs.examples import example_paths

    hints = _hints()
    for path in example_paths():
        code = path.read_text()
        shown = hints.without_declared_hint(code)
        assert read_declarations(code).get("hint") and not read_declarations(shown).get("hint")
        ast.parse(shown)
        lines, kept = code.splitlines(), shown.splitlines()
        gone = [line for line in lines if line not in kept]
        assert 1 <= len(gone) <= 6 and gone[0].strip().startswith("hint"), path.stem
        assert [line for line in lines if line in kept] == kept  # the rest, in order
