"""The static gate: each check rejects a crafted broken design with the verifier's kind, passes
good ones (every bundled example and the reference pool), and never runs what it reads."""

import re
from pathlib import Path
from typing import Any

import pytest

from spade.envs.examples import example_paths
from spade.records import Failure, FailureKind
from spade.verify.gate import GATE_CHECKS, Design, Finding, check_parses, gate

EXAMPLES = {p.stem: p.read_text() for p in example_paths()}
POOL = Path(__file__).parents[1] / "fixtures" / "reference_pool" / "games"

GAME = '''
"""A guessing game."""

from spade.envs import TextEnv


class GuessEnv(TextEnv):
    def setup(self):
        self.secret = self.rng.randint(1, 9)
        return "Guess a digit from 1 to 9."

    def play(self, move):
        if move != str(self.secret):
            return "no", 0.0, False
        return "yes", 1.0, True

    def solution(self):
        return ["\\\\boxed{" + str(self.secret) + "}"]
'''

TOOLS = """
class LookupEnv(ToolUseEnv):
    def setup(self):
        self.value = self.rng.randint(1, 99)
        return "Find the value and answer it."

    def tool_read(self) -> int:
        return self.value

    def check_answer(self, answer):
        return float(answer.strip() == str(self.value))

    def solution(self):
        call = '<tool_call>{"name": "read", "arguments": {}}</tool_call>'
        return [call, f"<answer>{self.value}</answer>"]
"""


def rejected(code: str, kind: FailureKind, pattern: str, **kwargs: Any) -> Failure:
    failure = gate(code, **kwargs)
    assert failure is not None, "the gate passed it"
    assert failure.kind is kind, failure
    assert re.search(pattern, failure.reason), failure.reason
    return failure


def test_the_checks_run_in_order():
    names = ["parses", "hook_arity", "self_attributes", "bare_names", "near_copy"]
    assert [name for name, _ in GATE_CHECKS] == names


def test_good_designs_pass():
    assert gate(GAME) is None and gate(TOOLS) is None


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_every_bundled_example_passes(path):
    assert gate(path.read_text()) is None


@pytest.mark.parametrize("path", sorted(POOL.glob("*.py")), ids=lambda p: p.stem)
def test_reference_style_designs_pass(path):
    """Injected names (deque, np, ToolUseBaseEnv) are known; a foreign base is not judged."""
    assert gate(path.read_text()) is None


# parses


def test_syntax_errors_and_oversized_sources_are_syntax():
    rejected("def (:\n", FailureKind.SYNTAX, r"^line 1: ")
    scope_error = "def f():\n    x = 1\n    global x\n"  # parses; the compiler refuses it
    rejected(scope_error, FailureKind.SYNTAX, r"line 3: name 'x' is assigned to before global")
    rejected(GAME, FailureKind.SYNTAX, r"over the 100-byte limit", max_bytes=100)


# hook_arity


def test_play_returning_two_values_is_a_crash():
    bad = GAME.replace('return "no", 0.0, False', 'return "no", 0.0')
    rejected(bad, FailureKind.CRASH, r"^play\(\) returns a 2-tuple \(line 14\); .*ValueError")
    four = GAME.replace('return "yes", 1.0, True', 'return "yes", 1.0, True, {}')
    rejected(four, FailureKind.CRASH, r"^play\(\) returns a 4-tuple \(line 15\)")


def test_setup_returning_a_tuple_is_a_contract_failure():
    bad = GAME.replace('return "Guess a digit from 1 to 9."', 'return "Guess.", {}')
    rejected(bad, FailureKind.CONTRACT, r"^setup\(\) returns a 2-tuple \(line 10\); .*str")


def test_check_answer_returning_a_tuple_is_a_crash():
    bad = TOOLS.replace("return float(answer.strip() == str(self.value))", "return 1.0, 'ok'")
    rejected(bad, FailureKind.CRASH, r"^check_answer\(\) returns a 2-tuple .*TypeError")


def test_returns_the_gate_cannot_size_pass():
    nested = GAME.replace(
        "    def play(self, move):\n",
        "    def play(self, move):\n        pair = lambda: (1, 2)\n"
        "        def inner():\n            return 1, 2\n",
    )
    starred = GAME.replace('return "no", 0.0, False', 'return ("no", *[0.0, False])')
    called = GAME.replace('return "no", 0.0, False', "return self.answer()")
    called += '\n    def answer(self):\n        return "no", 0.0, False\n'
    bypassed = GAME.replace('return "no", 0.0, False', 'return "no", 0.0')
    bypassed += "\n    def act(self, action):\n        return self.play(action) + (False,)\n"
    for code in (nested, starred, called, bypassed):
        assert gate(code) is None, code


# self_attributes


def test_reading_an_attribute_never_assigned_is_a_crash():
    bad = GAME.replace("if move != str(self.secret):", "if move != str(self.target):")
    rejected(
        bad,
        FailureKind.CRASH,
        r"^self\.target is read in play \(line 13\) but never assigned \(AttributeError",
    )


def test_every_way_of_assigning_an_attribute_counts():
    code = GAME.replace(
        '        return "Guess a digit from 1 to 9."\n',
        "        self.a, (self.b, self.c) = 1, (2, 3)\n"
        "        self.d: int = 4\n"
        "        for self.e in range(2):\n            pass\n"
        "        with open('x') as self.f:\n            pass\n"
        "        self.g += 1\n"
        '        return "Guess a digit from 1 to 9."\n',
    ).replace(
        "    def play(self, move):\n",
        "    limit = 9\n\n"
        "    @property\n    def shown(self):\n        return self.secret\n\n"
        "    def play(self, move):\n"
        "        _ = (self.a, self.b, self.c, self.d, self.e, self.f, self.g, self.limit)\n"
        "        _ = (self.shown, self.solution, self.rng, self.turn, self.max_turns, self.done)\n",
    )
    assert gate(code) is None


def test_attributes_the_gate_cannot_follow_pass():
    read = 'if move != str(self.secret):\n            return "no", 0.0, False'
    cases = {
        "setattr": 'setattr(self, "target", 1)',
        "vars": "vars(self).update(target=1)",
        "hasattr": 'if not hasattr(self, "target"):\n            return "no", 0.0, False',
        "try": "try:\n            self.target\n        except AttributeError:\n            pass",
    }
    for label, guard in cases.items():
        code = GAME.replace(read, f"{guard}\n        self.target\n        {read}")
        if label == "try":  # the read is guarded only inside the try
            code = GAME.replace(read, f"{guard}\n        {read}")
        assert gate(code) is None, label
    foreign = GAME.replace("class GuessEnv(TextEnv):", "class GuessEnv(TextEnv, Mixin):")
    foreign = "class Mixin:\n    target = 1\n" + foreign.replace("self.secret)", "self.target)")
    assert gate(foreign) is None


def test_a_tool_reading_a_missing_attribute_is_left_to_the_verifier():
    """call_tool answers a tool's AttributeError with an error text: no crash to predict."""
    assert gate(TOOLS.replace("return self.value\n", "return self.missing\n")) is None
    bad = TOOLS.replace("answer.strip() == str(self.value)", "answer.strip() == str(self.missing)")
    rejected(bad, FailureKind.CRASH, r"^self\.missing is read in check_answer")


# bare_names


def test_a_forgotten_import_is_a_crash():
    bad = GAME.replace('return "no", 0.0, False', "return str(Fraction(move)), 0.0, False")
    rejected(
        bad,
        FailureKind.CRASH,
        r"^name 'Fraction' is read in play \(line 14\) but never defined or imported \(NameError",
    )
    rejected("X = Y + 1\n", FailureKind.CRASH, r"^name 'Y' is read at module level \(line 1\)")
    method_sees_no_class_names = GAME.replace(
        "    def setup(self):\n        self.secret = self.rng.randint(1, 9)",
        "    TOP = 9\n\n    def setup(self):\n        self.secret = self.rng.randint(1, TOP)",
    )
    rejected(method_sees_no_class_names, FailureKind.CRASH, r"^name 'TOP' is read in setup")


def findings(code: str) -> list[Finding]:
    """What every check finds in ``code`` (parsed first, as the gate does)."""
    design = Design(code)
    assert check_parses(design) is None
    return [found for _, check in GATE_CHECKS[1:] if (found := check(design)) is not None]


def test_a_finding_says_which_method_meets_the_failure_and_on_which_line():
    """Where the jail would meet it (grading a rejected design's progress), given as data, not
    read back out of the reason."""
    lines = GAME.splitlines()
    [found] = findings(GAME.replace('return "no", 0.0, False', "return self.nope, 0.0, False"))
    assert (found.method, found.line) == (
        "play",
        lines.index('            return "no", 0.0, False') + 1,
    )
    [found] = findings(GAME.replace('return "yes", 1.0, True', 'return "yes", 1.0'))
    assert found.method == "play" and found.line is not None
    [found] = findings("import math\n\nX = Y + 1\n")
    assert (found.method, found.line) == ("module", 3)
    syntax = check_parses(Design("class ("))  # nothing runs: no method, no line
    assert syntax is not None and syntax.failure.kind is FailureKind.SYNTAX
    assert (syntax.method, syntax.line) == (None, None)


def test_names_bound_before_or_outside_the_module_body_pass():
    code = (
        "import json as j\n"  # the design's own imports
        "def setup_counter():\n    global COUNT\n    COUNT = 0\n"  # bound through ``global``
        "def uses(x: int) -> List[int]:\n"  # prelude: typing names, modules, reference names
        "    local: Undefined = 1\n"  # a local annotation is never evaluated
        "    return [random.random(), math.pi, deque(), Callable, j, COUNT, len(x), __name__]\n"
    )
    assert gate(GAME + code) is None
    lazy = "from __future__ import annotations\n\ndef f(a: Nowhere) -> Elsewhere:\n    return a\n"
    assert gate(lazy) is None
    rejected(lazy.split("\n", 2)[2], FailureKind.CRASH, r"^name '(Nowhere|Elsewhere)'")
    assert gate("from math import *\n\nX = tau + nothing\n") is None  # star imports: unknown


# near_copy


def renamed(code: str) -> str:
    return code.replace("GuessEnv", "DigitEnv").replace("self.secret", "self.hidden")


def test_the_parent_renamed_is_a_near_copy():
    rejected(
        renamed(GAME),
        FailureKind.DUPLICATE,
        r"^a near-verbatim copy of 'parent': source similarity 1\.000 >= 0\.99$",
        parent=GAME,
    )
    example = EXAMPLES["code_breaker"]
    copy = example.replace("class CodeBreakerEnv", "class VaultEnv")
    failure = rejected(copy, FailureKind.DUPLICATE, r"'v3'", parent=example, parent_name="v3")
    assert failure.reason.endswith(">= 0.99")


def test_a_real_variant_or_an_unreadable_parent_passes():
    variant = GAME.replace("randint(1, 9)", "randint(10, 99)").replace(
        "a digit from 1 to 9", "a number"
    )
    assert gate(variant, parent=GAME, max_similarity=0.99) is None
    assert gate(variant, parent=GAME, max_similarity=0.5) is not None
    assert gate(GAME, parent="def (:") is None
    assert gate(GAME, parent=EXAMPLES["maze_walk"]) is None


# the gate never runs the design


def test_the_gate_never_executes_the_design(tmp_path):
    marker = tmp_path / "ran"
    effect = f"open({str(marker)!r}, 'w').write('ran')\n"
    assert gate(effect + GAME) is None  # passes on its source alone
    rejected(effect + GAME + "\nY = Missing\n", FailureKind.CRASH, r"'Missing'")
    rejected(GAME + "\n" + effect + "def (:\n", FailureKind.SYNTAX, r"line")
    assert gate(effect + renamed(GAME), parent=effect + GAME) is not None
    assert not marker.exists()
