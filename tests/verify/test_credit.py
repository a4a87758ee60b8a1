"""The ``perverse_credit`` check: credit that rewards the wrong thing (issue 34). The 0.5B
coder's rule splices of number_hunt scored the farther guess higher or a closer guess 0 and
passed every other check; the 1.5B coder's splice of polynomial_probe scored fewer right
coefficients higher (but none right 0) and passed a near-against-far comparison, so the check
plays a closeness ladder. Every bundled example must still pass with itself as its parent;
with no parent, every bundled and reference-pool game: tests/verify/test_bundled_games.py."""

import pytest

from spade.envs.examples import example_paths
from spade.verify import Reference, verify
from spade.verify.credit import altered, ladder

pytestmark = pytest.mark.sandbox

EXAMPLES = {p.stem: p.read_text() for p in example_paths()}
HUNT = EXAMPLES["number_hunt"]
RULE = "return 0.5 * (1 - distance / self.top)"
POLY = EXAMPLES["polynomial_probe"]
POLY_RULE = "        return 0.5 * right / 4\n"


def test_a_near_miss_moves_the_last_digit_a_far_miss_every_digit():
    assert altered("\\boxed{990}") == "\\boxed{991}"
    assert altered("\\boxed{990}", None, 5) == "\\boxed{445}"
    assert altered("\\boxed{answer 1, -2, 0, 7}", None, 5) == "\\boxed{answer 6, -7, 5, 2}"
    assert altered("\\boxed{N}") == "\\boxed{N}"


def test_the_ladder_runs_from_the_near_miss_through_the_last_k_digits_to_the_far_miss():
    moves = [move for _, move in ladder("\\boxed{answer 1, -2, 0, 7}")]
    assert moves == [
        "\\boxed{answer 1, -2, 0, 8}",  # near: 3 of 4 right
        "\\boxed{answer 1, -2, 0, 2}",  # last digit by five: 3 right
        "\\boxed{answer 1, -2, 5, 2}",  # last two: 2 right
        "\\boxed{answer 1, -7, 5, 2}",  # last three: 1 right
        "\\boxed{answer 6, -7, 5, 2}",  # far (every digit): none right
    ]
    assert [move for _, move in ladder("\\boxed{7}")] == ["\\boxed{8}", "\\boxed{2}"]
    assert ladder("\\boxed{N}") == []
    long = ladder("<answer>" + ", ".join(str(n) for n in range(10, 30)) + "</answer>")
    assert (
        len(long) == 8
        and long[-1][1]
        == "<answer>"
        + ", ".join(
            str(n) for n in [*range(65, 70), *range(60, 65), *range(75, 80), *range(70, 75)]
        )
        + "</answer>"
    )  # near, six spaced middle rungs of 40 digits, far


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ("return 0.5 * distance / self.top", "the farther the better"),
        ("return 0.0 if distance < self.top // 4 else 0.5 * (1 - distance / self.top)", "close: 0"),
    ],
)
def test_credit_that_falls_as_the_guess_gets_closer_is_perverse(rule, why, policy):
    variant = HUNT.replace(RULE, rule)
    assert variant != HUNT, why
    verdict = verify(variant, policy=policy, references=[Reference("number_hunt", HUNT)])
    assert verdict.failed_check == "perverse_credit", verdict.to_dict()
    assert verdict.failure is not None and verdict.failure.kind == "perverse_credit"
    assert "credit falls as the guess gets closer on 3 of 3 seeds" in verdict.failure.reason
    assert "'number_hunt', which it varies, scores them 0.499499 and" in verdict.failure.reason


def test_credit_that_falls_as_more_coefficients_are_right_is_perverse(policy):
    """The 1.5B coder's splice of polynomial_probe: 1 right 0.375, 2 right 0.25, 3 right 0.125,
    none right 0. A near miss (3 right) still beats a far one (none right); the ladder's middle
    rungs show the fall."""
    rule = "        if right == 0:\n            return 0.0\n        return 0.5 * (1 - right / 4)\n"
    variant = POLY.replace(POLY_RULE, rule)
    assert variant != POLY
    parent = [Reference("polynomial_probe", POLY)]
    verdict = verify(variant, policy=policy, references=parent)
    assert verdict.failed_check == "perverse_credit", verdict.to_dict()
    assert verdict.failure is not None and verdict.failure.kind == "perverse_credit"
    reason = verdict.failure.reason
    assert "credit falls as the guess gets closer on 3 of 3 seeds: on seed 1234" in reason
    assert "with its last digit moved by one (a near miss)" in reason
    assert "scores 0.125, with its last 3 digits moved by five" in reason
    assert "0.375; 'polynomial_probe', which it varies, scores them 0.375 and 0.125" in reason


def test_credit_that_rises_with_the_coefficients_right_passes_the_ladder(policy):
    """Another kept design of that run: right / 4, 1 for all four: steeper than the parent's
    0.5 * right / 4, and never reversed."""
    rule = "        if right == 4:\n            return 1.0\n        return right / 4.0\n"
    variant = POLY.replace(POLY_RULE, rule)
    assert variant != POLY
    verdict = verify(variant, policy=policy, references=[Reference("polynomial_probe", POLY)])
    credit = next(c for c in verdict.checks if c.name == "perverse_credit")
    assert credit.passed, verdict.to_dict()
    assert "'polynomial_probe', which it varies" in credit.reason
    assert "orders them (27 pairs), on 3 of 3 seeds" in credit.reason


def test_a_parent_whose_answers_do_not_win_the_design_defines_nothing(policy):
    """number_hunt over 1 to 5000 hides other numbers than over 1 to 999: the parent's misses
    are guesses unrelated to its answer, and their order says nothing (the two-point check
    passed it by luck; the ladder's middle rungs reversed at random)."""
    retuned = HUNT.replace(
        "top: int = 999, guesses: int = 10", "top: int = 5000, guesses: int = 13"
    )
    assert retuned != HUNT
    verdict = verify(retuned, policy=policy, references=[Reference("number_hunt", HUNT)])
    credit = next(c for c in verdict.checks if c.name == "perverse_credit")
    assert credit.passed, verdict.to_dict()
    assert credit.reason.endswith(
        "'number_hunt', which it varies, do not win it: nothing to compare"
    )


def test_without_a_parent_closeness_is_not_judged(policy):
    variant = HUNT.replace(RULE, "return 0.5 * distance / self.top")
    credit = next(c for c in verify(variant, policy=policy).checks if c.name == "perverse_credit")
    assert credit.passed and credit.reason.endswith("no parent defines closeness")


def test_credit_below_zero_is_perverse(policy):
    verdict = verify(HUNT.replace(RULE, "return -0.5 * distance / self.top"), policy=policy)
    assert verdict.failed_check == "perverse_credit", verdict.to_dict()
    assert verdict.failure is not None
    assert "partial credit is a share of the win, in [0, 1]" in verdict.failure.reason


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_bundled_example_passes_as_its_own_parent(name, policy):
    """Its own parent (similarity 1): the parent's closeness is the design's; the verdict then
    fails novelty (a copy), after this check."""
    verdict = verify(EXAMPLES[name], policy=policy, references=[Reference(name, EXAMPLES[name])])
    credit = next(c for c in verdict.checks if c.name == "perverse_credit")
    assert credit.passed and verdict.failed_check == "novelty", verdict.to_dict()
