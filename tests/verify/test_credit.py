"""The ``perverse_credit`` check: credit that rewards the wrong thing (issues 34 and 49).

Issue 34: the 0.5B coder's rule splices of number_hunt scored the farther guess higher or a
closer guess 0; the 1.5B coder's splice of polynomial_probe scored fewer right coefficients
higher. Issue 49: a red team of rewrites had misses paid nearly a win or whatever the answer,
idle plays paid, a reversal on one seed of three, a wrong answer paid as a win. Each design here
is a bundled example edited as its designer would (``edited``), checked with the example as its
parent; the good rewrites and every bundled and reference-pool game must pass with a parent that
orders misses, so the ladder runs (the reason counts the pairs). Without references, every
bundled and reference-pool game: tests/verify/test_bundled_games.py."""

import re
from pathlib import Path

import pytest

from spade.config import VerifyConfig
from spade.verify import Reference, verify
from spade.verify.credit_plays import altered, ladder, plays_of
from tests.verify.lookalikes import EXAMPLES, edited

pytestmark = pytest.mark.sandbox

HUNT_RULE = "return 0.5 * (1 - distance / self.top)"
POLY_RULE = "        return 0.5 * right / 4\n"
POOL = Path(__file__).parents[1] / "fixtures" / "reference_pool" / "games"


def _credit(code: str, parent: str, policy):
    """The design's verdict with the bundled example ``parent`` as its only reference, and its
    perverse_credit check (None when an earlier check rejected it)."""
    verdict = verify(code, policy=policy, references=[Reference(parent, EXAMPLES[parent])])
    return verdict, next((c for c in verdict.checks if c.name == "perverse_credit"), None)


def _perverse(code: str, parent: str, policy) -> str:
    verdict, _ = _credit(code, parent, policy)
    assert verdict.failed_check == "perverse_credit", verdict.to_dict()
    assert verdict.failure is not None and verdict.failure.kind == "perverse_credit"
    return verdict.failure.reason


def _passes(code: str, parent: str, policy) -> str:
    verdict, credit = _credit(code, parent, policy)
    assert credit is not None and credit.passed, verdict.to_dict()
    return credit.reason


def _pairs(reason: str) -> int:
    found = re.search(r"no closer miss scores below a farther one \((\d+) pairs\)", reason)
    assert found, reason
    return int(found[1])


def _misses_and_idle(reason: str) -> tuple[int, int]:
    """How many misses and idle plays of the parent the check compared the design's with."""
    found = re.search(r"\((\d+) misses\), no idle play paid above its pay \((\d+) plays\)", reason)
    assert found, reason
    return int(found[1]), int(found[2])


# -- the ladder and the plays ------------------------------------------------------------------


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


def test_a_rung_that_only_reorders_the_answers_numbers_is_no_miss():
    """cargo_knapsack's load 1, 6 with every digit moved by five is load 6, 1: the same set."""
    assert [move for _, move in ladder("\\boxed{load 1, 6}")] == [
        "\\boxed{load 1, 7}",
        "\\boxed{load 1, 1}",
    ]


def test_the_idle_plays_give_up_repeat_and_skip_the_solutions_other_moves():
    plays = plays_of(["\\boxed{f(0)}", "\\boxed{f(1)}", "\\boxed{answer 1, 2, 3, 4}"], ["?"])
    idle = [(p.label, p.moves, p.then[:1], p.rung) for p in plays if not p.miss]
    assert idle == [
        ("the empty play", (), ("",), None),
        ("the malformed actions in turn", (), ("?",), None),
        ("giving up at once ('\\\\boxed{give up}', ...)", (), ("\\boxed{give up}",), None),
        (
            "giving up after the solution's other moves",
            ("\\boxed{f(0)}", "\\boxed{f(1)}"),
            ("\\boxed{give up}",),
            None,
        ),
        (
            "giving up after the near miss '\\\\boxed{answer 1, 2, 3, 5}'",
            ("\\boxed{f(0)}", "\\boxed{f(1)}", "\\boxed{answer 1, 2, 3, 5}"),
            ("\\boxed{give up}",),
            0,
        ),
        (
            "the near miss '\\\\boxed{answer 1, 2, 3, 5}' at once, the solution's other moves"
            " skipped",
            ("\\boxed{answer 1, 2, 3, 5}",),
            ("\\boxed{answer 1, 2, 3, 5}",),
            0,
        ),
        ("the solution's move '\\\\boxed{f(0)}' repeated", (), ("\\boxed{f(0)}",), None),
        ("the solution's move '\\\\boxed{f(1)}' repeated", (), ("\\boxed{f(1)}",), None),
    ]
    told = {p.label: p for p in plays_of(["<answer>42</answer>"], ["?"])}
    assert (
        told["giving up at once ('<answer>give up</answer>', ...)"].then[1]
        == "<answer>quit</answer>"
    )


def test_the_ceiling_and_the_seeds_are_bounded_settings():
    assert (VerifyConfig().max_miss_credit, VerifyConfig().credit_seeds) == (0.8, 8)
    with pytest.raises(ValueError):
        VerifyConfig(max_miss_credit=1.5)
    with pytest.raises(ValueError):
        VerifyConfig(credit_seeds=0)


# -- bad credit: rejected ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ("return 0.5 * distance / self.top", "the farther the better"),
        ("return 0.0 if distance < self.top // 4 else 0.5 * (1 - distance / self.top)", "close: 0"),
    ],
)
def test_credit_that_falls_as_the_guess_gets_closer_is_perverse(rule, why, policy):
    reason = _perverse(edited("number_hunt", (HUNT_RULE, rule)), "number_hunt", policy)
    assert "credit falls as the guess gets closer on" in reason, why
    assert "'number_hunt', which it varies, scores them 0.499499 and" in reason


def test_credit_only_for_misses_beyond_half_the_range_falls_on_one_seed_and_is_perverse(policy):
    """The demo designer's rule: 0 for a miss within half the range, more the farther beyond.
    Only where the far miss lies beyond half the range (seed 1234: 990 -> 445) does it reverse:
    on one seed of the three probe seeds (the rule of "most seeds" let it through), 2 of 8."""
    rule = "return 0.5 * distance / self.top if distance > self.top // 2 else 0.0"
    reason = _perverse(edited("number_hunt", (HUNT_RULE, rule)), "number_hunt", policy)
    assert "credit falls as the guess gets closer on 2 of 8 seeds: on seed 1234" in reason
    assert "every digit moved by five (a far miss) ('\\\\boxed{445}') 0.272773" in reason


def test_credit_that_falls_as_more_coefficients_are_right_is_perverse(policy):
    """The 1.5B coder's splice of polynomial_probe: 1 right 0.375, 2 right 0.25, 3 right 0.125,
    none right 0. A near miss (3 right) still beats a far one (none right); the ladder's middle
    rungs show the fall."""
    rule = "        if right == 0:\n            return 0.0\n        return 0.5 * (1 - right / 4)\n"
    reason = _perverse(edited("polynomial_probe", (POLY_RULE, rule)), "polynomial_probe", policy)
    assert "credit falls as the guess gets closer on 8 of 8 seeds: on seed 1234" in reason
    assert "with its last digit moved by one (a near miss)" in reason
    assert "scores 0.125, the answer" in reason and "with its last 3 digits moved by five" in reason
    assert "0.375; 'polynomial_probe', which it varies, scores them 0.375 and 0.125" in reason


def test_misses_paid_nearly_a_win_are_perverse(policy):
    """0.95 less a hundredth of the distance's share: every miss 0.94 or more."""
    rule = "return 0.95 - distance / self.top / 100"
    reason = _perverse(edited("number_hunt", (HUNT_RULE, rule)), "number_hunt", policy)
    assert reason.startswith("on seed 1234 the answer '\\\\boxed{990}' with its last digit")
    assert "is paid 0.94999 (" in reason
    assert "more than 'number_hunt', which it varies, pays it (0.499499)" in reason
    assert "and than max_miss_credit 0.8" in reason


def test_a_credit_paid_whatever_the_answer_above_the_ceiling_is_perverse(policy):
    reason = _perverse(edited("number_hunt", (HUNT_RULE, "return 0.9")), "number_hunt", policy)
    assert reason.startswith("on seed 1234 every miss of the answer is paid 0.9 whatever it is,")
    assert "'number_hunt', which it varies, pays them 0.227227 to 0.499499" in reason


def test_three_of_four_right_paid_a_full_win_is_perverse(policy):
    code = edited("polynomial_probe", ("if right == 4:", "if right >= 3:"))
    reason = _perverse(code, "polynomial_probe", policy)
    assert reason.startswith("a wrong answer wins: on seed 1234, the answer")
    assert "with its last digit moved by one (a near miss)" in reason
    assert "'polynomial_probe', which it varies, pays it 0.375" in reason


def test_a_win_when_the_count_right_equals_a_coefficient_on_one_seed_is_perverse(policy):
    """The demo designer's rule: a full win when as many are right as the constant term says.
    Seed 1236's constant is -1: one right wins there, and only there."""
    code = edited("polynomial_probe", ("if right == 4:", "if right in (4, abs(self.coeffs[3])):"))
    reason = _perverse(code, "polynomial_probe", policy)
    assert reason.startswith("a wrong answer wins: on seed 1236, the answer")
    assert "with its last 3 digits moved by five" in reason


def test_a_play_that_repeats_one_guess_paid_is_perverse(policy):
    """code_breaker adding up every guess's exact digits: the probe guess repeated ten times
    earns the most a miss can, as its parent pays a single best guess."""
    code = edited(
        "code_breaker",
        ("self.best = max(self.best, exact)", "self.best += exact"),
        ("return 0.5 * self.best / self.length", "return min(0.5, 0.5 * self.best / self.length)"),
    )
    reason = _perverse(code, "code_breaker", policy)
    assert reason.startswith("a play that makes no progress is paid: on seed 1234 the solution's")
    assert "move '\\\\boxed{0179}' repeated pays 0.5" in reason
    assert "more than 'code_breaker', which it varies, pays it (0.25)" in reason


def test_saving_the_budget_paid_is_perverse(policy):
    """polynomial_probe paying a tenth for each evaluation left: the near miss submitted at once
    earns more than the same miss after the evaluations."""
    rule = "        return 0.5 * right / 4 + 0.1 * (self.queries - self.used)\n"
    reason = _perverse(edited("polynomial_probe", (POLY_RULE, rule)), "polynomial_probe", policy)
    assert "a play that makes no progress is paid: on seed 1234 the near miss" in reason
    assert "at once, the solution's other moves skipped pays 0.875" in reason
    assert "more than it pays the miss it contains played out (0.475)" in reason


def test_giving_up_paid_is_perverse(policy):
    code = edited(
        "number_hunt",
        (
            '        text = move.strip().rstrip(".")\n',
            '        text = move.strip().rstrip(".")\n'
            '        if text == "give up":\n'
            '            return "You gave up.", 0.25, True\n',
        ),
    )
    reason = _perverse(code, "number_hunt", policy)
    assert "on seed 1234 giving up at once ('\\\\boxed{give up}', ...) pays 0.25" in reason
    assert "more than 'number_hunt', which it varies, pays it (0)" in reason


def test_malformed_actions_paid_are_perverse(policy):
    code = edited(
        "number_hunt",
        (
            'return self.end(f"Invalid guess {move!r}: give one whole number from 1 to {self.top}.")',
            'return f"Invalid guess {move!r}.", 0.1, True',
        ),
    )
    reason = _perverse(code, "number_hunt", policy)
    assert (
        "on seed 1234 the malformed actions in turn pays 0.1 (moves '', '   ', '\\\\boxed{}')"
        in reason
    )
    assert "more than 'number_hunt', which it varies, pays it (0)" in reason


def test_credit_below_zero_is_perverse(policy):
    code = edited("number_hunt", (HUNT_RULE, "return -0.5 * distance / self.top"))
    reason = _perverse(code, "number_hunt", policy)
    assert "partial credit is a share of the win, in [0, 1]" in reason


# -- what is not perverse ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule",
    [
        "return 0.75 * (1 - distance / self.top)",  # closeness, below the ceiling
        "return 0.0",  # stricter: every miss 0
        "return 0.5 * (1 - math.log(1 + distance) / math.log(1 + self.top))",
        "return 0.5 * (1 - distance / self.top) ** 3",  # sharper closeness
    ],
    ids=["closeness", "strict", "log-distance", "sharper"],
)
def test_good_number_hunt_credits_pass_the_ladder(rule, policy):
    changes = [(HUNT_RULE, rule)]
    if "math." in rule:
        changes.append(("from spade.envs", "import math\n\nfrom spade.envs"))
    reason = _passes(edited("number_hunt", *changes), "number_hunt", policy)
    assert "as 'number_hunt', which it varies, on 8 of 8 seeds" in reason
    assert _pairs(reason) > 0


def test_a_millionth_for_any_miss_is_paid_whatever_the_answer_and_is_perverse(policy):
    """About 1e-6 whatever the miss: harmless to a learner, but a credit that pays a submission
    without reading it, as 0.45 would; the stricter credit (0 for every miss) passes above."""
    reason = _perverse(edited("number_hunt", (HUNT_RULE, "return 1e-6")), "number_hunt", policy)
    assert reason.startswith("every miss of the answer is paid 1e-06 whatever it is, on 8 seeds")
    assert "'number_hunt', which it varies, pays them 0.227227 to 0.499499" in reason


def test_credit_that_rises_with_the_coefficients_right_passes_the_ladder(policy):
    """A kept design of the 1.5B run: right / 4, 1 for all four; 3 right earns 0.75, more than
    the parent's 0.375 and within the ceiling."""
    rule = "        if right == 4:\n            return 1.0\n        return right / 4.0\n"
    reason = _passes(edited("polynomial_probe", (POLY_RULE, rule)), "polynomial_probe", policy)
    assert "'polynomial_probe', which it varies, on 8 of 8 seeds" in reason
    assert _pairs(reason) > 0


def test_closeness_added_to_a_parent_that_pays_misses_nothing_passes(policy):
    """code_breaker as it ships, against a parent that pays every miss 0: its misses and its
    repeated probe guess are paid by closeness, which the parent does not forbid."""
    strict = edited("code_breaker", ("return 0.5 * self.best / self.length", "return 0.0"))
    verdict = verify(EXAMPLES["code_breaker"], policy=policy, references=[Reference("s", strict)])
    credit = next(c for c in verdict.checks if c.name == "perverse_credit")
    assert credit.passed, verdict.to_dict()
    assert "as 's', which it varies, on 8 of 8 seeds" in credit.reason
    assert _pairs(credit.reason) == 0  # the parent orders none


def test_a_parent_whose_answers_do_not_win_the_design_is_judged_on_its_own(policy):
    """number_hunt over 1 to 5000 hides other numbers than over 1 to 999: the parent's misses
    are guesses unrelated to its answer, and their order says nothing; its own misses are
    judged without closeness."""
    retuned = edited(
        "number_hunt",
        ("top: int = 999, guesses: int = 10", "top: int = 5000, guesses: int = 13"),
    )
    reason = _passes(retuned, "number_hunt", policy)
    assert (
        "the answers of 'number_hunt', which it varies, do not win it (closeness not judged)"
        in reason
    )


def test_without_a_parent_closeness_is_not_judged(policy):
    code = edited("number_hunt", (HUNT_RULE, "return 0.5 * distance / self.top"))
    credit = next(c for c in verify(code, policy=policy).checks if c.name == "perverse_credit")
    assert credit.passed and "no parent (closeness not judged)" in credit.reason


def test_without_a_parent_misses_all_paid_nearly_a_win_are_perverse(policy):
    code = edited("number_hunt", (HUNT_RULE, "return 0.95 - distance / self.top / 100"))
    verdict = verify(code, policy=policy)
    assert verdict.failed_check == "perverse_credit", verdict.to_dict()
    assert verdict.failure is not None
    assert verdict.failure.reason.startswith(
        "every miss of the answer on 8 seeds is paid more than max_miss_credit 0.8"
    )


# -- no false positive: the ladder runs ---------------------------------------------------------


def _renamed(code: str) -> str:
    """The same game, its class renamed: similar enough to be taken for the parent."""
    name = re.search(r"^class (\w+Env)\b", code, re.MULTILINE)
    assert name
    return code.replace(name[1], "Renamed" + name[1])


ORDERS_NO_PAIR = {
    "bank_transfer": "its answer, a confirmation id, is one of three checks: every miss 2/3",
    "order_fulfillment": "its answer, the total, is one of five checks: every miss 0.8",
    "maze_walk": "its answers (directions) have no digits: no ladder, only idle plays",
    "ownership_riddle": "its answer (names) has no digits: no ladder, only idle plays",
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_bundled_example_passes_against_its_renamed_copy(name, policy):
    """The renamed copy is the parent (similarity 1): the parent's ladder is the design's; the
    verdict then fails novelty (a copy), after this check."""
    code = EXAMPLES[name]
    verdict = verify(code, policy=policy, references=[Reference("copy", _renamed(code))])
    credit = next(c for c in verdict.checks if c.name == "perverse_credit")
    assert credit.passed and verdict.failed_check == "novelty", verdict.to_dict()
    assert "as 'copy', which it varies, on 8 of 8 seeds" in credit.reason
    misses, idle = _misses_and_idle(credit.reason)
    assert idle > 0
    if name in ORDERS_NO_PAIR:
        assert _pairs(credit.reason) == 0, ORDERS_NO_PAIR[name]
        assert (misses > 0) == (name not in ("maze_walk", "ownership_riddle"))
    else:
        assert _pairs(credit.reason) > 0 and misses > 0


def _pool(name: str, *changes: tuple[str, str]) -> str:
    code = (POOL / f"{name}.py").read_text()
    for old, new in changes:
        assert old in code, f"{name} changed: {old!r} is gone"
        code = code.replace(old, new)
    return code


def _closeness(wrong: str, share: str) -> tuple[str, str]:
    """A parent's wrong-answer reply paying half the closeness ``share`` (from 0 to 1)."""
    return (
        f"        return ({wrong} if match else",
        f"        if match:\n"
        f"            return {wrong}, 0.5 * max(0.0, {share}), True, False, {{}}\n"
        f"        return ({wrong} if match else",
    )


# Reference-pool games pay every miss 0 (a wrong answer does not end them): each is checked
# against a parent that pays closeness, so the parent orders the misses and the ladder runs.
POOL_PARENTS = {
    "game_matrix_walks": _closeness(
        '"Wrong."', "1 - abs(int(match.group(1)) - int(self._answer)) / int(self._answer)"
    ),
    # the share of the fraction's characters in place
    "game_fraction_sum": _closeness(
        '"Wrong."',
        "sum(a == b for a, b in zip(match.group(1), self._answer)) / len(self._answer)",
    ),
    "game_modular_chain": (
        '            hint = "too high" if guess > self._answer else "too low"\n',
        '            hint = "too high" if guess > self._answer else "too low"\n'
        "            off = abs(guess - self._answer) / self.modulus\n"
        '            return f"Wrong: {hint}.", 0.5 * max(0.0, 1 - off), True, False, {}\n',
    ),
}


@pytest.mark.parametrize(
    "name",
    sorted(
        p.stem
        for p in POOL.glob("*.py")
        if p.stem not in ("game_broken_ledger", "game_fixed_lighthouses")
    ),
)
def test_every_reference_pool_game_passes_against_a_parent(name, policy):
    code = (POOL / f"{name}.py").read_text()
    parent = _pool(name, POOL_PARENTS[name]) if name in POOL_PARENTS else _renamed(code)
    verdict = verify(code, policy=policy, references=[Reference("parent", parent)])
    credit = next(c for c in verdict.checks if c.name == "perverse_credit")
    assert credit.passed, verdict.to_dict()
    assert "as 'parent', which it varies, on 8 of 8 seeds" in credit.reason
    misses, idle = _misses_and_idle(credit.reason)
    assert idle > 0
    # inventory_audit's parent is its renamed copy (a tool game: no closeness parent written);
    # file_organiser's answer, "done", has no digits
    assert (_pairs(credit.reason) > 0) == (name in POOL_PARENTS)
    assert (misses > 0) == (name != "game_file_organiser")
