"""The splice strategy: plans for every bundled parent, answers spliced into the parent's tree,
and (in the jail) a spliced design verified like any other."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from spade.config import load_config
from spade.designer.designer import verify_design
from spade.designer.directives import DIRECTIVES, draw_directive
from spade.designer.splice import (
    FENCE,
    answer_methods,
    answer_text,
    class_name_for,
    plan_splice,
    splice,
)
from spade.envs.examples import example_paths
from spade.errors import DesignParseError
from spade.sandbox.policy import load_policy

NUMBER_HUNT = next(p for p in example_paths() if p.stem == "number_hunt").read_text()

# A rule-level change of number_hunt (the hidden state becomes a word, feedback counts letters
# in place), written as the methods a splice answer holds after its prefilled signature.
WORD_ANSWER = """\
        words = ["amber", "basil", "cedar", "delta", "ember", "flint", "grove", "haven"]
        self.word = self.rng.choice(words)
        self.used = 0
        return (
            "Guess the hidden five-letter word from: " + ", ".join(words)
            + ". Write it in a box, like \\\\boxed{amber}. I say how many letters are in place."
            f" You have {self.guesses} guesses."
        )

    def play(self, move: str) -> tuple[str, float, bool]:
        guess = move.strip().lower()
        if len(guess) != 5 or not guess.isalpha():
            return "Give one five-letter word.", 0.0, False
        self.used += 1
        if guess == self.word:
            return "Right!", 1.0, True
        hits = sum(a == b for a, b in zip(guess, self.word))
        if self.used >= self.guesses:
            return f"{hits} letters in place. No guesses left.", hits / 10, True
        return f"{hits} letters in place.", 0.0, False

    def solution(self) -> list[str]:
        return ["\\\\boxed{" + self.word + "}"]
"""


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_every_bundled_parent_has_a_plan_that_starts_at_setup(path: Path):
    plan = plan_splice(path.read_text())
    assert plan is not None and plan.asked[0] == "setup"
    assert plan.prefill.startswith(FENCE) and "    def setup(self" in plan.prefill
    assert "```" in plan.stop and "\nclass " in plan.stop
    assert "__init__" not in plan.asked and "__init__" not in plan.helpers
    assert ("play" in plan.asked) != ("check_answer" in plan.asked)


def test_a_parent_without_an_env_class_or_setup_is_not_spliced():
    assert plan_splice("x = 1\n") is None
    assert plan_splice("class AEnv(TextEnv):\n    def play(self, m):\n        return m\n") is None
    assert plan_splice("class AEnv(TextEnv)\n") is None  # does not parse


def test_the_answer_replaces_the_parents_methods_and_renames_the_class():
    plan = plan_splice(NUMBER_HUNT)
    assert plan is not None and "\n    def __init__(" in plan.stop
    code, names = splice(
        NUMBER_HUNT,
        answer_text(plan.prefill, WORD_ANSWER + "```\nsome words after the fence"),
        class_name=class_name_for("Cedar is a wood", plan.class_name),
        skill="logical_deduction",
        note='number_hunt spliced (hidden_state) on doc "1".',
    )
    assert names == ["setup", "play", "solution"]
    tree = ast.parse(code)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert cls.name == "CedarNumberHuntEnv"
    methods = {n.name: ast.get_source_segment(code, n) for n in cls.body if hasattr(n, "name")}
    assert "self.word = self.rng.choice(words)" in methods["setup"]
    assert "hits" in methods["play"] and "self.number" not in methods["play"]
    assert methods["__init__"]  # what was not rewritten stays
    assert "end" not in methods  # ... but a helper of the parent nothing calls any more goes
    assert "skill = 'logical_deduction'" in code and '    hint = ""' in code
    assert "Bisection" not in code and "Guess the middle" not in code and "some words" not in code
    assert ast.get_docstring(tree) == "number_hunt spliced (hidden_state) on doc '1'."


def test_a_new_helper_is_added_and_a_method_written_twice_counts_once():
    answer = (
        "    def setup(self) -> str:\n        return 'a'\n\n"
        "    @staticmethod\n    def helper(x):\n        return x\n\n"
        "    def setup(self) -> str:\n        return 'b'\n"
    )
    methods = answer_methods(answer)
    assert [n for n, _ in methods] == ["setup", "helper", "setup"]
    assert methods[1][1].startswith("    @staticmethod")
    assert not methods[0][1].rstrip().endswith("@staticmethod")
    code, names = splice(NUMBER_HUNT, answer, class_name="XEnv", skill="s", note="n")
    assert names == ["setup", "helper"]
    assert "return 'b'" in code and "return 'a'" not in code
    assert code.index("def helper") > code.index("def solution")  # appended to the class
    ast.parse(code)


def test_a_helper_the_answer_still_calls_stays():
    answer = (
        "    def setup(self) -> str:\n        self.number, self.closest, self.used = 5, None, 0\n"
        "        return 'guess'\n\n"
        "    def play(self, move: str) -> tuple[str, float, bool]:\n"
        "        return self.end('no', over=True)\n"
    )
    code, _ = splice(NUMBER_HUNT, answer, class_name="XEnv", skill="s", note="n")
    assert "    def end(self, text: str" in code


def test_an_answer_that_does_not_parse_is_spliced_as_written_for_the_verifier():
    answer = "    def setup(self) -> str:\n        return 'unclosed\n"
    code, _ = splice(NUMBER_HUNT, answer, class_name="XEnv", skill="s", note="n")
    assert "return 'unclosed" in code
    with pytest.raises(SyntaxError):
        ast.parse(code)


def test_an_answer_without_a_method_is_a_parse_failure():
    with pytest.raises(DesignParseError, match="no method"):
        splice(NUMBER_HUNT, "just words\n", class_name="XEnv", skill="s", note="n")


def test_directives_are_drawn_by_seed_and_never_ask_for_constants():
    draws = [draw_directive(random.Random(i)).name for i in range(40)]
    assert draws == [draw_directive(random.Random(i)).name for i in range(40)]
    assert set(draws) == {d.name for d in DIRECTIVES}
    assert all("constant" not in d.text for d in DIRECTIVES)


@pytest.mark.sandbox
def test_a_spliced_design_is_verified_in_the_jail_and_accepted():
    plan = plan_splice(NUMBER_HUNT)
    assert plan is not None
    code, _ = splice(
        NUMBER_HUNT,
        answer_text(plan.prefill, WORD_ANSWER),
        class_name="CedarNumberHuntEnv",
        skill="logical_deduction",
        note="number_hunt spliced (hidden_state).",
    )
    cfg = load_config(None, {})
    policy = load_policy(cfg.sandbox.policy_path)
    verdict = verify_design(code, cfg, policy, [{"name": "number_hunt", "code": NUMBER_HUNT}])
    assert verdict.accepted, verdict.to_dict()
    assert verdict.class_name == "CedarNumberHuntEnv" and verdict.skill == "logical_deduction"


def test_what_kept_helpers_read_is_named_for_the_answers_setup():
    plan = plan_splice(NUMBER_HUNT)
    assert plan is not None
    assert plan.helpers == ("clue", "end", "credit")
    assert plan.needed == ("self.number", "self.closest")
    assert plan.attributes == ("self.top", "self.guesses")


def test_module_names_read_through_self_get_class_aliases_and_the_hint_stays_a_name():
    parent = (
        "import re\n\n_QUERY = re.compile(r'\\\\d+')\n\n\ndef clamp(x):\n    return max(0, x)\n\n\n"
        "class QEnv(TextEnv):\n    hint = 'old game'\n\n    def setup(self) -> str:\n"
        "        return 'q'\n\n    def play(self, move):\n        return 'x', 0.0, True\n\n"
        "    def solution(self):\n        return ['1']\n"
    )
    answer = (
        "    def setup(self) -> str:\n        self.n = self.clamp(self.random.randint(1, 3))\n"
        "        return self.hint\n\n"
        "    def play(self, move: str) -> tuple[str, float, bool]:\n"
        "        ok = self._QUERY.fullmatch(move) is not None and self.query is self._QUERY\n"
        "        return 'ok', float(ok), True\n"
    )
    code, _ = splice(parent, answer, class_name="XEnv", skill="s", note="n")
    assert "    _QUERY = _QUERY" in code and "    clamp = staticmethod(clamp)" in code
    assert "    query = _QUERY" in code  # the same name without its case and underscore
    assert '    hint = ""' in code and "old game" not in code
    assert "    random = property(lambda self: self.rng)" in code  # the seeded generator
    ast.parse(code)


@pytest.mark.parametrize(
    ("name", "asked"),
    [
        ("feedback", ("play",)),
        ("win_rule", ("play",)),
        ("legal_moves", ("play", "solution")),
        ("hidden_state", ("setup", "play", "solution")),
    ],
)
def test_a_directive_asks_only_for_the_hooks_its_change_needs(name, asked):
    directive = next(d for d in DIRECTIVES if d.name == name)
    plan = plan_splice(NUMBER_HUNT, directive)
    assert plan is not None and plan.asked == asked
    first = {"play": "    def play(self, move: str) -> tuple[str, float, bool]:\n"}
    assert plan.prefill == FENCE + first.get(asked[0], "    def setup(self) -> str:\n")
    # the parent's setup stays when it is not asked for, and with it what it assigns
    assert plan.needed == (("self.number", "self.closest") if "setup" in asked else ())
    assert ("setup" in plan.helpers) == ("setup" not in asked)


def test_a_tool_use_parent_is_asked_for_check_answer_as_its_move():
    parent = next(p for p in example_paths() if "check_answer" in p.read_text()).read_text()
    plan = plan_splice(parent, next(d for d in DIRECTIVES if d.name == "feedback"))
    assert plan is not None and plan.asked == ("check_answer",)


def test_the_prompt_says_where_the_attributes_come_from():
    from spade.designer.prompts import splice_prompt

    class Parent:
        env_id, code_head = "number_hunt", NUMBER_HUNT

    for name, where in (("feedback", "what the setup above assigns"), ("hidden_state", "in setup")):
        directive = next(d for d in DIRECTIVES if d.name == name)
        plan = plan_splice(NUMBER_HUNT, directive)
        assert plan is not None
        text = splice_prompt("doc", "s", parent=Parent(), directive=directive, plan=plan)[-1]
        assert where in text["content"] and directive.text in text["content"]
        assert f"without its methods {', '.join(plan.asked)}:" in text["content"]
