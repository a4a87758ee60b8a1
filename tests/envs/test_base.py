import json

from spade.envs import TextEnv, ToolError, ToolUseEnv


class Counter(TextEnv):
    def setup(self):
        self.target = self.rng.randint(1, 9)
        return "guess"

    def play(self, move):
        return ("yes", 1.0, True) if move == str(self.target) else ("no", 0.0, False)

    def solution(self):
        return [f"\\boxed{{{self.target}}}"]


class Shop(ToolUseEnv):
    def setup(self):
        self.stock = {"apple": 3}
        return "How many apples?"

    def tool_count(self, item: str, verbose: bool = False) -> int:
        """Count an item.

        Args:
            item: the item name
            verbose: unused
        """
        if item not in self.stock:
            raise ToolError(f"no item {item}")
        return self.stock[item]

    def tool_crash(self, n: int) -> int:
        """Breaks on bad input."""
        return 10 // n

    def check_answer(self, answer):
        return 1.0 if answer == "3" else 0.0

    def solution(self):
        return [
            '<tool_call>{"name": "count", "arguments": {"item": "apple"}}</tool_call>',
            "<answer>3</answer>",
        ]


def test_text_env_seeding_turns_and_truncation():
    env = Counter(max_turns=3)
    obs1, info = env.reset(seed=5)
    target = env.target
    env.reset(seed=5)
    assert env.target == target and obs1 == "guess" and info["max_turns"] == 3
    assert env.step("no box")[0] == Counter.invalid_format_message
    env.step("\\boxed{x}")
    obs, reward, terminated, truncated, _ = env.step("\\boxed{x}")
    assert (reward, terminated, truncated) == (0.0, False, True) and "Out of turns" in obs
    assert env.step(env.solution()[0])[2] is True  # after the end: stays over
    env.reset(seed=5)
    assert env.step(env.solution()[0])[1:4] == (1.0, True, False)


class Reader(TextEnv):
    def setup(self):
        self.target = 4
        return "guess"

    def play(self, move):
        return ("yes", 1.0, True) if int(move) == self.target else ("no", 0.0, False)

    def solution(self):
        return [self.target]


def test_a_value_error_in_play_refuses_the_move_and_the_turn_counts():
    env = Reader(max_turns=2)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("\\boxed{four}")
    assert obs.startswith("That move cannot be played: invalid literal for int()")
    assert (reward, terminated, truncated, info["turn"]) == (0.0, False, False, 1)
    assert env.step("\\boxed{4}")[1:3] == (1.0, True)


def test_tool_schemas_from_signatures_and_docstrings():
    schemas = {s["function"]["name"]: s["function"] for s in Shop().tools()}
    assert set(schemas) == {"count", "crash"}  # base helpers are not tools
    params = schemas["count"]["parameters"]
    assert params["properties"]["item"] == {"type": "string", "description": "the item name"}
    assert params["properties"]["verbose"]["type"] == "boolean"
    assert params["required"] == ["item"]
    assert schemas["count"]["description"] == "Count an item."
    json.dumps(schemas)


def test_tool_use_protocol_errors_are_observations():
    env = Shop()
    env.reset(seed=0)
    assert (
        "3"
        in env.step('<tool_call>{"name": "count", "arguments": {"item": "apple"}}</tool_call>')[0]
    )
    assert (
        "no item pear"
        in env.step('<tool_call>{"name": "count", "arguments": {"item": "pear"}}</tool_call>')[0]
    )
    assert "unknown tool" in env.step('<tool_call>{"name": "nope"}</tool_call>')[0]
    assert (
        "bad arguments"
        in env.step('<tool_call>{"name": "count", "arguments": {"x": 1}}</tool_call>')[0]
    )
    assert (
        "ZeroDivisionError"
        in env.step('<tool_call>{"name": "crash", "arguments": {"n": 0}}</tool_call>')[0]
    )
    assert "not valid JSON" in env.step("<tool_call>{oops</tool_call>")[0]
    assert env.step("hello")[0] == Shop.invalid_format_message
    obs, reward, terminated, _, _ = env.step("<answer>3</answer>")
    assert (reward, terminated) == (1.0, True) and "correct" in obs
