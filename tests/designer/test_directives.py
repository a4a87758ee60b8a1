"""The splice menu: rule directives (one small rule method of the parent) against the
contract-level ones, how a directive is drawn for a parent, and a rule splice verified in the
jail: accepted, and novel by play although its source is the parent's but for one method."""

from __future__ import annotations

import random
from typing import get_args

import pytest

from spade.config import load_config
from spade.config.roles import DirectiveName
from spade.designer.designer import verify_design
from spade.designer.directives import DIRECTIVE_NAMES, DIRECTIVES, directive_named, draw_directive
from spade.designer.prompts import splice_prompt
from spade.designer.splice import FENCE, answer_text, parent_methods, plan_splice, splice
from spade.envs.examples import example_paths
from spade.records import Verdict
from spade.sandbox.policy import load_policy
from spade.verify.novelty import near_miss

EXAMPLES = {p.stem: p.read_text() for p in example_paths()}
NUMBER_HUNT = EXAMPLES["number_hunt"]
CLUE = directive_named("clue")

# A clue of another kind (a distance band instead of higher/lower), as the answer after the
# prefilled signature and docstring.
BAND_CLUE = """\
        gap = abs(guess - self.number)
        band = "burning" if gap <= 10 else "warm" if gap <= 100 else "cold"
        return f"{guess} is {band}."
"""


def test_the_config_names_the_menu_in_order():
    assert get_args(DirectiveName) == DIRECTIVE_NAMES
    assert load_config(None, {}).designer.directives == list(DIRECTIVE_NAMES)


def test_rule_directives_are_offered_only_by_parents_that_define_their_method():
    with_clue = [n for n, code in EXAMPLES.items() if "clue" in parent_methods(code)]
    assert {"number_hunt", "code_breaker", "polynomial_probe", "cargo_knapsack"} <= set(with_clue)
    maze = parent_methods(EXAMPLES["maze_walk"])
    assert "clue" not in maze
    for seed in range(20):
        rng = random.Random(seed)
        assert draw_directive(rng, maze, ["clue", "credit"]).rule is False  # the fallback
        drawn = draw_directive(random.Random(seed), parent_methods(NUMBER_HUNT), ["clue"])
        assert drawn.name == "clue"
    assert all(d.rule == (d.name in ("clue", "credit")) for d in DIRECTIVES)


@pytest.mark.parametrize("name", ["number_hunt", "code_breaker", "polynomial_probe"])
def test_a_rule_plan_asks_for_one_method_prefilled_with_its_docstring(name):
    assert CLUE is not None
    plan = plan_splice(EXAMPLES[name], CLUE)
    assert plan is not None and plan.asked == ("clue",)
    assert plan.prefill.startswith(FENCE + "    def clue(self")
    assert plan.prefill.rstrip().endswith('"""')  # the docstring says what the method is for
    assert "\n    def " in plan.stop  # the answer ends where another method would begin
    assert "self.rng" not in plan.state and plan.state  # what setup assigns, to be read


def test_the_rule_prompt_shows_the_parent_without_the_method_and_names_the_state():
    assert CLUE is not None
    plan = plan_splice(NUMBER_HUNT, CLUE)
    assert plan is not None

    class Parent:
        env_id, code_head = "number_hunt", NUMBER_HUNT

    text = splice_prompt("Cedar doc", "s", parent=Parent(), directive=CLUE, plan=plan)[-1]
    content = text["content"]
    assert "without its method clue:" in content and CLUE.text in content
    assert "self.number" in content and "self.closest" in content
    assert "def clue(" not in content.split("without its method clue:")[1].split("```")[1]


def spliced_verdict(parent: str, directive: str, body: str) -> tuple[str, Verdict]:
    """The parent (a bundled example's name) with ``body`` as the answer to ``directive``,
    spliced and verified against the parent."""
    rule = directive_named(directive)
    assert rule is not None
    plan = plan_splice(EXAMPLES[parent], rule)
    assert plan is not None and plan.asked == (directive,)
    code, names = splice(
        EXAMPLES[parent],
        answer_text(plan.prefill, body),
        class_name="CedarVariantEnv",
        skill="mathematical_reasoning",
        note=f"{parent} spliced ({directive}).",
    )
    assert names == [directive]
    cfg = load_config(None, {})
    policy = load_policy(cfg.sandbox.policy_path)
    return code, verify_design(code, cfg, policy, [{"name": parent, "code": EXAMPLES[parent]}])


@pytest.mark.sandbox
def test_a_rule_splice_is_accepted_and_novel_by_play():
    code, verdict = spliced_verdict("number_hunt", "clue", BAND_CLUE + "```")
    assert "burning" in code and "def play(" in code
    assert verdict.accepted, verdict.to_dict()
    novelty = next(c for c in verdict.checks if c.name == "novelty")
    assert "plays differently" in novelty.reason


@pytest.mark.sandbox
def test_a_rule_splice_that_changes_nothing_is_a_duplicate():
    same = (
        '        direction = "higher" if self.number > guess else "lower"\n'
        '        return f"My number is {direction} than {guess}."\n'
    )
    _, verdict = spliced_verdict("number_hunt", "clue", same)
    assert not verdict.accepted and verdict.failure is not None, verdict.to_dict()
    assert verdict.failure.kind == "duplicate", verdict.to_dict()


def test_the_near_miss_changes_one_digit_of_the_last_move():
    assert near_miss(["\\boxed{f(0)}", "\\boxed{answer 1, 2, 3, 9}"]) == [
        "\\boxed{f(0)}",
        "\\boxed{answer 1, 2, 3, 0}",
    ]
    assert near_miss(["\\boxed{amber}"]) == [] and near_miss([]) == []


@pytest.mark.sandbox
def test_a_new_partial_credit_rule_is_novel_by_its_near_miss():
    body = "        return 0.9 * (right / 4) ** 2\n```"
    _, verdict = spliced_verdict("polynomial_probe", "credit", body)
    assert verdict.accepted, verdict.to_dict()
    novelty = next(c for c in verdict.checks if c.name == "novelty")
    assert "near-miss play" in novelty.reason


@pytest.mark.sandbox
def test_a_clue_reworded_one_to_one_is_a_duplicate():
    # the 0.5B coder's clue splice of number_hunt (bench/designs.py, seed 1): higher/lower
    # worded as too low/too high, the same clue
    reworded = (
        "        if guess < self.number:\n"
        '            return f"Too low, {guess} is too low."\n'
        "        else:\n"
        '            return f"Too high, {guess} is too high."\n'
    )
    assert_duplicate(reworded)
    # the same clue without the guess repeated back (seed 1 of the bench): the player knows
    # what it guessed
    assert_duplicate(
        "        if guess < self.number:\n"
        '            return "The number is higher."\n'
        '        return "The number is lower."\n'
    )


def assert_duplicate(answer: str) -> None:
    _, verdict = spliced_verdict("number_hunt", "clue", answer)
    assert verdict.failure is not None and verdict.failure.kind == "duplicate", verdict.to_dict()
    assert "worded differently, one to one" in verdict.failure.reason
