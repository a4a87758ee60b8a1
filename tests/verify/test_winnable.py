"""The ``winnable`` check: observation-only players win the bundled examples; a design that keeps
its parent's feedback but lies or adds noise to it is not won by playing, and is rejected."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade.config import VerifyConfig
from spade.sandbox.session import JailedSession
from spade.verify import Reference, verify
from spade.verify.leaks import needed
from spade.verify.players import (
    PLAYERS,
    Abstain,
    BankTransfer,
    CargoKnapsack,
    Contradiction,
    NumberHunt,
    OrderFulfillment,
    OwnershipRiddle,
)
from spade.verify.winnable import NOT_APPLICABLE, new_words, play_all
from tests.verify.lookalikes import EXAMPLES, edited

pytestmark = pytest.mark.sandbox

GAMES = Path(__file__).parents[1] / "fixtures" / "reference_pool" / "games"
CONFIG = VerifyConfig()
SEEDS = [CONFIG.seed + i for i in range(16)]
RETUNED = {  # one retuned size per example (tool-use tasks have none but their turn bound)
    "number_hunt": {"top": 1999, "guesses": 11},
    "code_breaker": {"length": 5, "guesses": 12},
    "polynomial_probe": {"queries": 3},  # fewer values than coefficients: f(10), f(-10), f(0)
    "cargo_knapsack": {"crates": 10},
    "maze_walk": {"size": 6},
    "switchboard": {"experiments": 4},
    "sequence_oracle": {"asks": 4},
    "ownership_riddle": {"questions": 3},
    "bank_transfer": {"max_turns": 8},
    "order_fulfillment": {"max_turns": 12},
}


def test_every_bundled_example_has_a_player():
    assert set(PLAYERS) == set(EXAMPLES) == set(RETUNED)


@pytest.mark.parametrize(
    ("stem", "sizes"),
    [(s, {}) for s in sorted(PLAYERS)] + [(s, RETUNED[s]) for s in sorted(PLAYERS)],
    ids=lambda v: str(v) if isinstance(v, dict) else v,
)
def test_each_player_wins_its_example_on_every_seed(stem, sizes, policy):
    kwargs = {"max_turns": CONFIG.max_turns, **sizes}
    with JailedSession(EXAMPLES[stem], policy=policy, env_kwargs=kwargs) as session:
        outcomes = play_all(session, stem, SEEDS, CONFIG)
    lost = [o.describe() for o in outcomes if not o.won]
    if stem == "maze_walk":
        # no walk that sees only the rooms it entered finds every exit in time (over 1,000
        # seeds at 5x5 this one loses ~6%): it is held to the check's own bar
        assert len(outcomes) - len(lost) >= needed(len(SEEDS)), lost
    else:
        assert not lost, lost


def test_a_player_abstains_on_feedback_it_does_not_read():
    player = NumberHunt()
    player(0, "I am thinking of a whole number from 1 to 99. You have 7 guesses.")
    with pytest.raises(Abstain, match="higher"):
        player(1, "My number is bigger than 50.")


def test_a_player_says_when_clues_contradict_each_other():
    player = NumberHunt()
    assert player(0, "a whole number from 1 to 4") == "\\boxed{2}"
    assert player(1, "My number is higher than 2.") == "\\boxed{3}"
    with pytest.raises(Contradiction, match="no number fits"):
        player(2, "My number is lower than 3.")  # above 2 and below 3
    riddle = OwnershipRiddle()
    opening = (
        "Ana, Ben each own exactly one of these pets, all different: cat, dog. Clues:\n"
        "- Ana does not own the cat.\nThe clues do not settle everything. Ask up to 2 yes/no"
        " questions like \\boxed{ask Ana cat}."
    )
    assert riddle(0, opening) == "\\boxed{Ana=dog, Ben=cat}"  # one assignment is left
    with pytest.raises(Abstain, match="clue"):
        OwnershipRiddle()(0, opening.replace("does not own", "never had"))


def test_a_player_reads_its_parents_sentence_about_its_move_with_text_added_after():
    hunt = NumberHunt()
    assert hunt(0, "I am thinking of a whole number from 1 to 99.") == "\\boxed{50}"
    assert hunt(1, "My number is higher than 50, and within 30. 6 guesses left.") == "\\boxed{75}"
    with pytest.raises(Abstain, match="than 75"):
        hunt(2, "My number is lower than 80.")  # said of another number than the guess
    crates = CargoKnapsack()
    crates(0, "Your ship's hold carries at most 20 tons. There are 2 crates, numbered 1 to 2")
    assert crates(1, "Crate 1: weight 7 tons, value 12 (1.7 per ton).") == "\\boxed{inspect 2}"
    with pytest.raises(Abstain, match="Crate 2"):
        crates(2, "Crate 2: weight 5 tons, value 3 per ton.")  # not the crate's value


def test_a_tool_player_abstains_on_a_result_whose_keys_or_kinds_changed():
    opening = "Mara Okafor asks you to pay invoice INV-12345 in full. Tools: get_invoice."
    for result, missing in [
        (
            '{"invoice_id": "INV-12345", "payee": "Summit Internet", "amount": "120.00"}',
            "amount_due",
        ),
        (
            '{"invoice_id": "INV-12345", "payee": "Summit Internet", "amount_due": 12000}',
            "amount_due",
        ),
    ]:
        bank = BankTransfer()
        bank(0, opening)
        with pytest.raises(Abstain, match=missing):
            bank(1, f"<tool_response>\n{result}\n</tool_response>")
    order = OrderFulfillment()
    order(0, "Order ORD-1234 must ship today. ... setting its stock to exactly 50 units")
    items = (
        '{"order_id": "ORD-1234", "status": "pending", "items": [{"sku": "SKU-1", "quantity": 3}]}'
    )
    assert "get_product" in order(1, f"<tool_response>{items}</tool_response>")
    product = '{"sku": "SKU-1", "name": "red mug", "price_cents": 1250, "stock": 2}'
    with pytest.raises(Abstain, match="price"):
        order(2, f"<tool_response>{product}</tool_response>")


def winnable(code: str, parent: str | None, policy) -> tuple[object, object]:
    refs = [Reference(parent, EXAMPLES[parent])] if parent else []
    verdict = verify(code, policy=policy, references=refs)
    return verdict, next((c for c in verdict.checks if c.name == "winnable"), None)


@pytest.mark.parametrize("stem", sorted(EXAMPLES))
def test_every_bundled_example_is_won_as_its_own_parent(stem, policy):
    _, check = winnable(EXAMPLES[stem], stem, policy)
    assert check is not None and check.passed, check
    assert f"the {stem} player, reading only the observations, wins" in check.reason


def test_what_the_player_loses_in_the_parent_too_is_not_held_against_a_design(policy):
    # seeds 50-57 hold two 5x5 mazes whose exit the maze walker does not find in time
    config = VerifyConfig(seed=50)
    code = EXAMPLES["maze_walk"]
    verdict = verify(code, config=config, policy=policy, references=[Reference("x", code)])
    check = next(c for c in verdict.checks if c.name == "winnable")
    assert check.passed and "wins 6 of 8 seeds; it loses 2 of them in 'maze_walk'" in check.reason


@pytest.mark.parametrize("name", sorted(p.name for p in GAMES.glob("game_*.py")))
def test_reference_pool_games_pass(name, policy):
    # the pool's fixed-instance game reaches the check only with seed_dependence waived; the
    # crashing one never does. None varies a bundled example: the check says so, and passes.
    code = (GAMES / name).read_text()
    refs = [Reference(stem, code) for stem, code in EXAMPLES.items()]
    config = VerifyConfig(waive=["seed_dependence"])
    verdict = verify(code, config=config, policy=policy, references=refs)
    check = next((c for c in verdict.checks if c.name == "winnable"), None)
    if verdict.failed_check == "class_found":
        return  # game_broken_ledger: its class does not load
    assert check is not None and check.passed and NOT_APPLICABLE in check.reason, check


# Designs that keep their parent's feedback, as the designer writes them, but whose clue lies on
# some instances or turns: solution() still wins each, reading the hidden state.
LIARS = {
    "number_hunt, direction inverted when the number is even": (
        "number_hunt",
        edited(
            "number_hunt",
            (
                'direction = "higher" if self.number > guess else "lower"',
                'direction = "higher" if (self.number > guess) != (self.number % 2 == 0)'
                ' else "lower"',
            ),
        ),
        "no number fits",
    ),
    "polynomial_probe, the constant coefficient whatever point is asked": (
        "polynomial_probe",
        edited(
            "polynomial_probe",
            ('return f"f({x}) = {self.value(x)}"', 'return f"f({x}) = {self.coeffs[-1]}"'),
        ),
        "leading coefficient is 0",
    ),
    "code_breaker, misplaced count off by one on some turns": (
        "code_breaker",
        edited(
            "code_breaker",
            (
                '        return f"{exact} exact, {misplaced} misplaced"',
                "        misplaced += self.rng.random() < 0.3  # a little noise\n"
                '        return f"{exact} exact, {misplaced} misplaced"',
            ),
        ),
        "no code fits every clue",
    ),
    "cargo_knapsack, odd crates shown 3 tons lighter": (
        "cargo_knapsack",
        edited(
            "cargo_knapsack",
            (
                "w, v = self.weights[crate - 1], self.values[crate - 1]",
                "w, v = self.weights[crate - 1] - 3 * (crate % 2), self.values[crate - 1]",
            ),
        ),
        "exceeds the capacity",
    ),
    "maze_walk, a wall sometimes shown as an open way": (
        "maze_walk",
        edited(
            "maze_walk",
            (
                'ways = ", ".join(_WORD[d] for d in "NESW" if d in self.open[self.pos])',
                'ways = ", ".join(_WORD[d] for d in "NESW"'
                " if d in self.open[self.pos] or self.rng.random() < 0.2)",
            ),
        ),
        "after a move through an open way",
    ),
}


@pytest.mark.parametrize("name", sorted(LIARS))
def test_a_clue_that_lies_is_not_won_by_playing(name, policy):
    parent, code, said = LIARS[name]
    verdict, _ = winnable(code, parent, policy)
    assert verdict.failed_check == "winnable", verdict.to_dict()
    assert verdict.failure is not None and verdict.failure.kind == "unsolvable"
    reason = verdict.failure.reason
    assert f"the {parent} player, reading only the observations, wins" in reason
    assert "seed " in reason and said in reason, reason


def test_a_liar_is_found_by_source_without_its_parent_given(policy):
    _, code, _ = LIARS["number_hunt, direction inverted when the number is even"]
    verdict, _ = winnable(code, None, policy)
    assert verdict.failed_check == "winnable", verdict.to_dict()


GOOD = {
    "number_hunt reworded (bigger/smaller)": (
        "number_hunt",
        edited(
            "number_hunt",
            (
                'direction = "higher" if self.number > guess else "lower"',
                'direction = "bigger" if self.number > guess else "smaller"',
            ),
        ),
        NOT_APPLICABLE,
    ),
    "number_hunt with a steeper credit": (
        "number_hunt",
        edited(
            "number_hunt",
            (
                "return 0.5 * (1 - distance / self.top)",
                "return 0.5 * (1 - distance / self.top) ** 2",
            ),
        ),
        "wins 8 of 8",
    ),
    "number_hunt retuned wider with one more guess": (
        "number_hunt",
        edited(
            "number_hunt",
            ("top: int = 999, guesses: int = 10", "top: int = 1999, guesses: int = 11"),
        ),
        "wins 8 of 8",
    ),
    "code_breaker retuned to five digits": (
        "code_breaker",
        edited(
            "code_breaker",
            ("length: int = 4, guesses: int = 10", "length: int = 5, guesses: int = 12"),
        ),
        "wins 8 of 8",
    ),
    "polynomial_probe retuned to three evaluations": (
        "polynomial_probe",
        edited("polynomial_probe", ("queries: int = 5", "queries: int = 3")),
        "wins 8 of 8",
    ),
    "maze_walk retuned to 6x6": (
        "maze_walk",
        edited("maze_walk", ("size: int = 5, moves: int = 22", "size: int = 6, moves: int = 25")),
        "the maze_walk player, reading only the observations, wins",
    ),
    "cargo_knapsack telling each crate's value per ton too": (
        "cargo_knapsack",
        edited(
            "cargo_knapsack",
            (
                'return f"Crate {crate}: weight {w} tons, value {v}."',
                'return f"Crate {crate}: weight {w} tons, value {v} ({v / w:.1f} per ton)."',
            ),
        ),
        "wins 8 of 8",
    ),
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_an_honest_rewrite_passes(name, policy):
    parent, code, said = GOOD[name]
    _, check = winnable(code, parent, policy)
    assert check is not None and check.passed and said in check.reason, check


def test_new_words_are_what_the_task_text_adds_to_its_parents():
    parent = "Move 12.50 from checking to the payee. You have 8 turns."
    design = "Move 14.00 from checking to the payee; each external payment carries a fee."
    assert new_words(design, parent) == ["each", "external", "payment", "carries", "fee"]
    assert new_words(parent.replace("8", "9"), parent) == []


# Honest rewordings of a parent's feedback whose words a loose reader misreads: the guess, not
# the number, is "lower"; "N exact, M misplaced" said of half the code; "f(x) = " followed by
# the expansion; "weight" followed by the value; a switch's old state before its new one; "No"
# that opens a yes. Each player reads only its parent's own sentence, so each abstains.
MISREAD = {
    "number_hunt: the guess is lower than the number": (
        "number_hunt",
        edited(
            "number_hunt",
            (
                'direction = "higher" if self.number > guess else "lower"',
                'direction = "lower" if self.number > guess else "higher"  # the guess\'s side',
            ),
            (
                'return f"My number is {direction} than {guess}."',
                'return f"Your guess {guess} is {direction} than my number."',
            ),
        ),
    ),
    "number_hunt: too low, too high": (
        "number_hunt",
        edited(
            "number_hunt",
            (
                'return f"My number is {direction} than {guess}."',
                'return "Too low." if direction == "higher" else "Too high."',
            ),
        ),
    ),
    "code_breaker: the left half's counts, then the whole code's": (
        "code_breaker",
        edited(
            "code_breaker",
            (
                '        return f"{exact} exact, {misplaced} misplaced"\n',
                "        h = self.length // 2\n"
                "        left = sum(a == b for a, b in zip(guess[:h], self.code[:h], strict=True))\n"
                "        near = len(set(guess[:h]) & set(self.code)) - left\n"
                '        return f"left half {left} exact, {near} misplaced; in all {exact} exact, {misplaced} misplaced"\n',
            ),
        ),
    ),
    "code_breaker: the counts the other way round, in other words": (
        "code_breaker",
        edited(
            "code_breaker",
            (
                'return f"{exact} exact, {misplaced} misplaced"',
                'return f"{misplaced} in the code elsewhere, {exact} in place"',
            ),
        ),
    ),
    "polynomial_probe: the value with its expansion": (
        "polynomial_probe",
        edited(
            "polynomial_probe",
            (
                'return f"f({x}) = {self.value(x)}"',
                'return f"f({x}) = {x**3}*a3 + {x**2}*a2 + {x}*a1 + a0 = {self.value(x)}"',
            ),
        ),
    ),
    "cargo_knapsack: tons of weight first": (
        "cargo_knapsack",
        edited(
            "cargo_knapsack",
            (
                'return f"Crate {crate}: weight {w} tons, value {v}."',
                'return f"Crate {crate}: {w} tons of weight, value {v}."',
            ),
        ),
    ),
    "switchboard: each flipped switch's old state, then its new one": (
        "switchboard",
        edited(
            "switchboard",
            (
                "        self.used = 0\n",
                "        self.used = 0\n        self.before = list(self.switches)\n",
            ),
            (
                "            for i in picked:\n",
                "            self.before = list(self.switches)\n            for i in picked:\n",
            ),
            (
                "        ups = \" \".join(f\"{i + 1}:{'up' if s else 'down'}\" for i, s in enumerate(self.switches))\n",
                '        ups = " ".join(\n'
                '            f"{i + 1}:" + ("" if b == s else "up->" if b else "down->") + ("up" if s else "down")\n'
                "            for i, (b, s) in enumerate(zip(self.before, self.switches, strict=True))\n"
                "        )\n",
            ),
        ),
    ),
    "ownership_riddle: no doubt, yes": (
        "ownership_riddle",
        edited(
            "ownership_riddle",
            (
                'return f"Yes: {self.people[person]} owns the {self.pets[pet]}."',
                'return f"No doubt: {self.people[person]} owns the {self.pets[pet]}."',
            ),
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(MISREAD))
def test_an_honest_rewording_a_loose_reader_misreads_is_not_applicable(name, policy):
    parent, code = MISREAD[name]
    _, check = winnable(code, parent, policy)
    assert check is not None and check.passed and NOT_APPLICABLE in check.reason, check
