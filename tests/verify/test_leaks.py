"""The ``leaks_answer`` check: a game whose observations print the answer is won by reading,
not by playing (issue 34). Readers submit what they see; the designs that printed their answer
must not pass (every bundled and reference-pool game must: tests/verify/test_bundled_games.py)."""

import pytest

from spade.envs.examples import example_paths
from spade.verify import Reference, verify
from spade.verify.leaks import AnswerForm, needed, readings

pytestmark = pytest.mark.sandbox

HUNT = next(p for p in example_paths() if p.stem == "number_hunt").read_text()
CLUE = 'return f"My number is {direction} than {guess}."'
# the 0.5B coder's clue splice of number_hunt (issue 34): the clue names the hidden number
LEAKY_HUNT = HUNT.replace(
    CLUE,
    'return f"So {guess} is your guess? Not quite what I had in mind, my friend. Let me tell'
    " you a story while you think: once upon a time a traveller walked the long road from the"
    " hills down to the sea, counting the stones along the way and singing to the birds, and"
    ' when the sun went down I thought it was around around {self.number}, give or take."',
)


def test_a_reader_needs_all_seeds_but_one_in_eight():
    assert [needed(n) for n in (1, 4, 7, 8, 16)] == [1, 4, 7, 7, 14]


def test_readers_submit_the_values_they_see_in_the_designs_answer_form():
    form = AnswerForm("\\boxed{12}", tool_use=False)
    moves = readings('Guess 3? I thought it was around 41, "blue".', form)
    assert moves["number #2"] == "\\boxed{41}" and moves["number #-1"] == "\\boxed{41}"
    assert moves["number after 'around'"] == "\\boxed{41}"
    assert moves["quoted string #1"] == "\\boxed{blue}"
    runs = readings("the values are 4 and 9", AnswerForm("answer 1, 2", tool_use=False))
    assert runs["run of 2 numbers #1"] == "answer 4, 9"
    tool = AnswerForm("<answer>7</answer>", tool_use=True)
    assert readings("it is 9", tool)["number #1"] == "<answer>9</answer>"


def test_a_clue_that_prints_the_number_leaks_the_answer(policy):
    assert LEAKY_HUNT != HUNT
    verdict = verify(LEAKY_HUNT, policy=policy)
    assert verdict.failed_check == "leaks_answer", verdict.to_dict()
    assert verdict.failure is not None and verdict.failure.kind == "leaks_answer"
    assert verdict.failure.reason.startswith("a reader wins 8 of 8 seeds"), verdict.failure.reason


def test_a_variant_of_a_parent_that_leaks_is_not_blamed_for_it(policy):
    variant = LEAKY_HUNT.replace("I thought it was around", "I had guessed around")
    parent = Reference("leaky_hunt", LEAKY_HUNT)
    verdict = verify(variant, policy=policy, references=[parent])
    leaks = next(c for c in verdict.checks if c.name == "leaks_answer")
    assert leaks.passed and "the leak is the parent's" in leaks.reason, leaks.reason
