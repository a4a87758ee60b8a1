"""The ``perverse_credit`` check: credit that rewards the wrong thing (issue 34). The 0.5B
coder's rule splices of number_hunt scored the farther guess higher or a closer guess 0 and
passed every other check; every bundled example and reference-pool game must still pass, with
no parent and with itself as its parent."""

from pathlib import Path

import pytest

from spade.envs.examples import example_paths
from spade.verify import Reference, verify
from spade.verify.credit import altered

pytestmark = pytest.mark.sandbox

EXAMPLES = {p.stem: p.read_text() for p in example_paths()}
HUNT = EXAMPLES["number_hunt"]
RULE = "return 0.5 * (1 - distance / self.top)"
POOL = Path(__file__).parents[1] / "fixtures" / "reference_pool" / "games"


def test_a_near_miss_moves_the_last_digit_a_far_miss_every_digit():
    assert altered("\\boxed{990}") == "\\boxed{991}"
    assert altered("\\boxed{990}", None, 5) == "\\boxed{445}"
    assert altered("\\boxed{answer 1, -2, 0, 7}", None, 5) == "\\boxed{answer 6, -7, 5, 2}"
    assert altered("\\boxed{N}") == "\\boxed{N}"


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


@pytest.mark.parametrize(
    "path", [*example_paths(), *sorted(POOL.glob("*.py"))], ids=lambda p: p.stem
)
def test_no_bundled_or_reference_game_has_perverse_credit(path, policy):
    verdict = verify(path.read_text(), policy=policy)
    credit = next((c for c in verdict.checks if c.name == "perverse_credit"), None)
    if path.stem in ("game_broken_ledger", "game_fixed_lighthouses"):  # rejected earlier
        assert credit is None and verdict.failed_check not in (None, "perverse_credit")
        return
    assert credit is not None and credit.passed, verdict.to_dict()
