"""The reference-compatibility module: its ToolUseBaseEnv and the adapter, on our own classes.

Reference pools themselves run only in the jail (tests/sandbox/test_reference_pool.py); the
classes here are this test's own code.
"""

import json

import pytest

from spade.envs import TextEnv
from spade.envs.prelude import (
    PRELUDE_MODULES,
    PRELUDE_NAMES,
    REFERENCE_MODULES,
    REFERENCE_NAMES,
    prelude_bindings,
    reference_bindings,
)
from spade.envs.reference import (
    FORMAT_PENALTY,
    ReferenceAdapter,
    ToolUseBaseEnv,
    adapt,
    walkthrough_calls,
)
from spade.sandbox.policy import DEFAULT_ALLOWED_MODULES


def call(name: str, **args: object) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


class Counter(ToolUseBaseEnv):
    """Add to a counter; answer its value."""

    resets = 0

    def reset(self, seed=None):
        type(self).resets += 1
        self.turn_count = 0
        self._state = {"n": 0}
        self._tools = {"add": {"description": "Add k", "parameters": {"type": "object"}}}
        self._expected_answer = "$1,000"
        return "Reach 1000.", {}

    def tool_add(self, k: int = 1) -> str:
        if k < 0:
            raise ValueError("k must be positive")
        self._state["n"] += k
        return str(self._state["n"])

    def solution(self) -> str:
        return "add(k=1000) ANSWER: 1000"


def test_init_resets_and_tools_become_openai_schemas():
    before = Counter.resets
    env = Counter(max_turns=5)
    assert Counter.resets == before + 1 and env.max_turns == 5 and env._call_history == []
    assert env.get_tools() == [
        {
            "type": "function",
            "function": {"name": "add", "description": "Add k", "parameters": {"type": "object"}},
        }
    ]


def test_step_runs_the_first_call_and_reads_the_answer_before_any_call():
    env = Counter(max_turns=10)
    obs, reward, term, trunc, info = env.step(call("add", k=2) + call("add", k=5))
    assert (obs, reward, term, trunc, info) == ("Tool result:\n2", 0.0, False, False, {})
    assert env._call_history == [{"name": "add", "arguments": {"k": 2}, "result": "2"}]
    # An answer wins over a call written before it; the call is not run.
    assert env.step(call("add", k=998) + "<answer>999</answer>")[1:3] == (0.0, False)
    assert env._state["n"] == 2
    env.step(call("add", k=998))
    assert env.step("<answer> 1,000.004 </answer>")[:3] == ("Correct!", 1.0, True)


@pytest.mark.parametrize(
    ("action", "reward", "says"),
    [
        ("no tags at all", FORMAT_PENALTY, "<tool_call>"),
        ("<tool_call>{not json</tool_call>", FORMAT_PENALTY, "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", FORMAT_PENALTY, "not valid JSON"),
        (call("delete_all"), 0.0, "Tools: add"),
        (call("add", k=-1), 0.0, "Error calling add: k must be positive"),
        (call("add", j=1), 0.0, "Error calling add"),
    ],
)
def test_malformed_actions_are_answered_not_raised(action, reward, says):
    obs, r, term, trunc, _ = Counter(max_turns=10).step(action)
    assert says in obs and (r, term, trunc) == (reward, False, False)


def test_the_last_turn_truncates_and_shows_the_solution():
    env = Counter(max_turns=2)
    env.step("thinking")
    obs, reward, term, trunc, _ = env.step("<answer>7</answer>")
    assert (reward, term, trunc) == (0.0, False, True) and "add(k=1000)" in obs


@pytest.mark.parametrize(
    ("given", "ok"),
    [("1000", True), ("$1,000", True), ("1000.009", True), ("1000.02", False), ("lots", False)],
)
def test_answers_compare_as_text_or_numbers(given, ok):
    assert Counter()._check_answer(given) is ok


def test_execute_tool_reports_a_return_code():
    env = Counter()
    assert env.execute_tool("add", {"k": 3}) == {"output": "3", "returncode": 0}
    assert env.execute_tool("add", {"k": -3})["returncode"] == 1
    assert env.execute_tool("nope", {}) == {"output": "Unknown tool 'nope'", "returncode": 1}


class Steps(ToolUseBaseEnv):
    """A multi-turn task that relies on the base's _advance_if_done."""

    def reset(self, seed=None):
        self._state = {"lights": False, "door": "open"}
        self._user_messages = ["Turn on the lights.", "Lock the door."]
        self._message_criteria = [lambda s: s["lights"], lambda s: s["door"] == "locked"]
        self._current_msg = 0
        self._expected_answer = "done"
        return self._user_messages[0], {}

    def tool_lights(self) -> str:
        self._state["lights"] = True
        return "lights on" + self._advance_if_done()

    def tool_lock(self) -> str:
        self._state["door"] = "locked"
        return "locked" + self._advance_if_done()

    def solution(self) -> str:
        return "1. lights() 2. lock() <answer>done</answer>"


def test_the_base_reveals_instructions_one_at_a_time():
    env = Steps(max_turns=10)
    assert "step 1 of 2" in env.step("<answer>no</answer>")[0]
    assert env.tool_lock() == "locked"  # not the current step: nothing advances
    assert env.tool_lights().endswith("[STEP 1 DONE. NEXT] Lock the door.")
    assert "step 2 of 2 is not done yet: Lock the door." in env._incorrect_answer_feedback()
    env._state["door"] = "open"
    assert "[ALL STEPS DONE]" in env.tool_lock() and env._current_msg == 2
    assert env._advance_if_done() == "" and env._obs_suffix() == ""


def test_a_walkthrough_becomes_tool_calls_and_the_answer():
    actions = ReferenceAdapter(Steps()).solution()
    assert actions == [call("lights"), call("lock"), "<answer>done</answer>"]
    # Without an <answer> block the expected answer closes it; tool_ prefixes are accepted.
    assert ReferenceAdapter(Counter()).solution() == [
        call("add", k=1000),
        "<answer>$1,000</answer>",
    ]


def test_walkthrough_calls_take_literal_arguments_of_known_tools_only():
    env = Counter()
    text = (
        "First tool_add(5), then add(k=x) (not a literal), print(1), ladd(k=2), "
        "add(k=')'), add(k=[1, (2)]) and add(, and unclosed add(k=1"
    )
    assert walkthrough_calls(env, text) == [
        call("add", k=5),
        call("add", k=")"),
        call("add", k=[1, 2]),
    ]
    assert walkthrough_calls(env, "add(k={1, 2}) add(k=b'x') add(3)") == [call("add", k=3)]


class Game:
    """A reference-style game: not built on our bases."""

    def __init__(self, answer):
        self.answer = answer

    def reset(self, seed=None):
        return "Guess."

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return self.answer


class Int64(int):
    """Stands in for a numpy scalar's shape: module 'numpy', an ``item()``."""

    __module__ = "numpy"

    def item(self) -> int:
        return int(self)


@pytest.mark.parametrize(
    ("answer", "actions"),
    [
        (" 42 ", ["\\boxed{42}"]),
        (7, ["\\boxed{7}"]),
        (2.5, ["\\boxed{2.5}"]),
        (Int64(9), ["\\boxed{9}"]),
        ("\\boxed{up} then \\boxed{left}", ["\\boxed{up}", "\\boxed{left}"]),
        (["\\boxed{1}"], ["\\boxed{1}"]),
        ({"not": "actions"}, {"not": "actions"}),
        (None, None),
    ],
)
def test_a_games_solution_becomes_actions(answer, actions):
    assert ReferenceAdapter(Game(answer)).solution() == actions


def test_the_adapter_gives_our_contracts_shapes():
    adapted = adapt(Game("x"))
    assert isinstance(adapted, ReferenceAdapter) and not adapted.tool_use
    assert adapted.reset(seed=3, options={"a": 1}) == ("Guess.", {})
    step = ReferenceAdapter(Game("x"))
    step.env.step = lambda action: ("ok", Int64(1), True, False, {})
    reward = step.step("a")[1]
    assert type(reward) is int and reward == 1
    tool_use = ReferenceAdapter(Counter())
    assert tool_use.tool_use and tool_use.tools() == Counter().get_tools()


def test_our_own_environments_are_not_adapted():
    class Mine(TextEnv):
        pass

    env = Mine()
    assert adapt(env) is env


def test_reference_names_are_bound_only_where_a_design_uses_them():
    used = {"np", "deque", "ToolUseBaseEnv", "Counter", "self", "numpy_like"}
    bound = reference_bindings(DEFAULT_ALLOWED_MODULES, used)
    assert bound == {
        "np": ("numpy", None),
        "deque": ("collections", "deque"),
        "Counter": ("collections", "Counter"),
        "ToolUseBaseEnv": ("spade.envs.reference", "ToolUseBaseEnv"),
    }
    narrow = reference_bindings(["collections", "spade.envs"], used)
    assert set(narrow) == {"deque", "Counter", "ToolUseBaseEnv"}  # numpy not allowed: not bound
    assert reference_bindings(DEFAULT_ALLOWED_MODULES, ()) == {}


def test_reference_names_do_not_clash_with_the_prelude():
    ours = set(PRELUDE_MODULES) | {n for group in PRELUDE_NAMES.values() for n in group}
    theirs = set(REFERENCE_MODULES) | {n for group in REFERENCE_NAMES.values() for n in group}
    assert not ours & theirs
    everything = prelude_bindings(DEFAULT_ALLOWED_MODULES)
    assert "ToolUseBaseEnv" not in everything and "np" not in everything


def test_options_reach_a_reset_that_takes_them():
    class Gym(Game):
        def reset(self, *, seed=None, options=None):
            return f"seed={seed} options={options}", {"gym": True}

    assert ReferenceAdapter(Gym("x")).reset(seed=1, options={"a": 1}) == (
        "seed=1 options={'a': 1}",
        {"gym": True},
    )
    assert ReferenceAdapter(Gym("x")).reset(seed=2)[0] == "seed=2 options=None"
