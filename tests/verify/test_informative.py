"""The ``informative`` check: a game whose instances look alike to every play is unsolvable
by any player, however feasible for code that reads its hidden state."""

import pytest

from spade.envs.examples import example_paths
from spade.verify import verify
from spade.verify.episodes import Episode
from spade.verify.informative import alike, seen

pytestmark = pytest.mark.sandbox

POLYNOMIAL = next(p for p in example_paths() if p.stem == "polynomial_probe").read_text()


def test_only_what_came_before_the_end_is_seen():
    episode = Episode(
        "task", [("a", "clue", 0.0, False, False, {}), ("b", "won", 1.0, True, False, {})]
    )
    assert seen(episode) == ["task", "clue"]


def test_plays_are_compared_up_to_the_shortest():
    assert alike([["task"], ["task", "wrong: 5 is a bit lower"]])  # one seed won at once
    assert not alike([["task", "higher"], ["task"], ["task", "lower"]])
    assert not alike([["task", "lower"], ["task", "higher"]])
    assert not alike([["task A"], ["task B", "lower"]])


def test_a_clue_that_names_only_the_move_is_unsolvable(policy):
    # the 0.5B coder's rule splice of polynomial_probe (bench/designs.py, seed 0)
    blind = POLYNOMIAL.replace('return f"f({x}) = {self.value(x)}"', 'return f"Point {x}."')
    assert blind != POLYNOMIAL
    verdict = verify(blind, policy=policy)
    assert not verdict.accepted and verdict.failed_check == "informative", verdict.to_dict()
    assert verdict.failure is not None and verdict.failure.kind == "unsolvable"
    assert "look alike to every play tried" in verdict.failure.reason


def test_a_clue_that_depends_on_the_hidden_state_passes(policy):
    verdict = verify(POLYNOMIAL, policy=policy)
    informative = next(c for c in verdict.checks if c.name == "informative")
    assert (
        informative.passed and "look different to seed 1234's solution play" in informative.reason
    )
