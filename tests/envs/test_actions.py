import pytest

from spade.envs.actions import (
    ToolCallError,
    extract_all_boxed,
    extract_answer,
    extract_boxed,
    parse_tool_call,
    split_solution,
    tool_call_bodies,
)


def test_boxed_takes_last_and_balances_braces():
    assert extract_boxed("a \\boxed{1} then \\boxed{ {x}{y} }") == "{x}{y}"
    assert extract_all_boxed("\\boxed{a}\\boxed{b}") == ["a", "b"]


@pytest.mark.parametrize("text", ["", "no box", "\\boxed{unclosed", "boxed{1}"])
def test_boxed_absent(text):
    assert extract_boxed(text) is None


def test_answer_takes_last():
    assert extract_answer("<answer> 1 </answer> <answer>2</answer>") == "2"
    assert extract_answer("<answer>open") is None


def test_tool_call_parsing():
    text = '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call><tool_call>{"name": "g"}</tool_call>'
    assert [parse_tool_call(b) for b in tool_call_bodies(text)] == [("f", {"x": 1}), ("g", {})]
    assert parse_tool_call('{"name": "f", "arguments": "{\\"x\\": 2}"}') == ("f", {"x": 2})


@pytest.mark.parametrize(
    "body",
    [
        "{bad",
        "[]",
        '{"name": 3}',
        '{"name": "f", "arguments": []}',
        '{"name": "f", "arguments": "{"}',
    ],
)
def test_tool_call_errors_have_reasons(body):
    with pytest.raises(ToolCallError):
        parse_tool_call(body)


def test_split_solution_forms():
    assert split_solution(["\\boxed{1}", "x"]) == ["\\boxed{1}", "x"]
    mixed = 'go \\boxed{a{b}} <tool_call>{"name": "f"}</tool_call> then <answer>7</answer>'
    assert split_solution(mixed) == [
        "\\boxed{a{b}}",
        '<tool_call>{"name": "f"}</tool_call>',
        "<answer>7</answer>",
    ]
    assert split_solution("just text") == ["just text"]


@pytest.mark.parametrize("bad", [None, 3, [1, "a"], {"a": 1}])
def test_split_solution_rejects_wrong_types(bad):
    with pytest.raises(TypeError):
        split_solution(bad)
