"""The ``informative`` check: a game whose instances look alike to every play is unsolvable
by any player, however feasible for code that reads its hidden state."""

import pytest

from spade.envs.examples import example_paths
from spade.verify import Reference, verify
from spade.verify.episodes import Episode
from spade.verify.informative import alike, masked, seen

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


def test_answers_are_compared_with_what_they_repeat_of_the_task_masked():
    view = ["Hold: 40 tons, 8 crates, 40 max.", "Hold 40, crate 3.", "8 and -8 and 40.5"]
    assert masked(view) == [
        view[0],
        "Hold <task number 0>, crate 3.",
        "<task number 1> and -8 and 40.5",
    ]
    a, b = masked(["Carry 40 tons.", "At most 40."]), masked(["Carry 41 tons.", "At most 41."])
    assert alike([a[1:], b[1:]]) and not alike([a, b])


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


def test_a_variant_whose_moves_no_longer_tell_anything_is_unsolvable(policy):
    # the 0.5B coder's clue splices of cargo_knapsack (bench/designs.py, seed 1): the task
    # text still names a capacity that differs by seed, the inspections say nothing
    cargo = next(p for p in example_paths() if p.stem == "cargo_knapsack").read_text()
    told = 'return f"Crate {crate}: weight {w} tons, value {v}."'
    assert told in cargo
    blind = cargo.replace(told, 'return f"You are inspecting crate number {crate}."')
    alone = verify(blind, policy=policy)
    informative = next(c for c in alone.checks if c.name == "informative")
    assert informative.passed and "answers alone tell them apart to no play" in informative.reason
    verdict = verify(blind, policy=policy, references=[Reference("cargo_knapsack", cargo)])
    assert verdict.failed_check == "informative", verdict.to_dict()
    assert verdict.failure is not None and verdict.failure.kind == "unsolvable"
    assert "in 'cargo_knapsack', which it varies" in verdict.failure.reason


def test_a_number_hunt_clue_that_never_changes_is_unsolvable(policy):
    # the 0.5B coder's clue splice of number_hunt (bench/designs.py, seed 0): the solution of
    # one seed wins at once there and is wrong elsewhere, which must not count as a difference
    # the player could use
    hunt = next(p for p in example_paths() if p.stem == "number_hunt").read_text()
    start = hunt.index('        direction = "higher"')
    end = hunt.index("    def end(")
    blind = hunt[:start] + '        return f"{guess} is a bit lower."\n\n' + hunt[end:]
    verdict = verify(blind, policy=policy)
    assert verdict.failed_check == "informative", verdict.to_dict()


def test_a_variant_whose_clue_repeats_the_task_text_is_unsolvable(policy):
    # the 0.5B coder's clue splice of cargo_knapsack (bench/designs.py, seed 1, issue 34): every
    # inspection answered with the hold's capacity, which differs by seed and is in the task
    # text already; compared raw, the answers told the seeds apart and it passed
    cargo = next(p for p in example_paths() if p.stem == "cargo_knapsack").read_text()
    told = 'return f"Crate {crate}: weight {w} tons, value {v}."'
    repeats = cargo.replace(told, 'return f"The hold carries at most {self.capacity} tons."')
    assert repeats != cargo
    verdict = verify(repeats, policy=policy, references=[Reference("cargo_knapsack", cargo)])
    assert verdict.failed_check == "informative", verdict.to_dict()
    assert verdict.failure is not None and verdict.failure.kind == "unsolvable"
    assert "what the answers repeat of the task text masked" in verdict.failure.reason
    half = cargo.replace(told, 'return f"Crate {crate} weighs {w} tons."')  # says something
    assert verify(half, policy=policy, references=[Reference("cargo_knapsack", cargo)]).accepted
