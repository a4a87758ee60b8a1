import random
import re

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


# -- linear time on design-supplied text (issue 12) ------------------------------------------

_OLD_BLOCK = re.compile(r"<tool_call>.*?</tool_call>|<answer>.*?</answer>|\\boxed\{", re.DOTALL)
_PIECES = ["<tool_call>", "</tool_call>", "<answer>", "</answer>", "\\boxed{", "{", "}", "x", " "]


def _regex_split(solution: str) -> list[str]:
    """The splitter as it was (a lazy regex per block kind): the oracle for its results."""
    actions: list[str] = []
    pos = 0
    while (m := _OLD_BLOCK.search(solution, pos)) is not None:
        if m.group(0) == "\\boxed{":
            found = extract_all_boxed(solution[m.start() :])
            if not found:
                break
            actions.append("\\boxed{" + found[0] + "}")
            pos = m.start() + len(actions[-1])
        else:
            actions.append(m.group(0))
            pos = m.end()
    return actions or [solution]


def test_linear_parsers_find_what_the_regexes_found():
    rng = random.Random(12)
    for _ in range(5000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 12)))
        assert split_solution(text) == _regex_split(text), text
        bodies = re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL)
        assert tool_call_bodies(text) == [b.strip() for b in bodies], text
        answers = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
        assert extract_answer(text) == (answers[-1].strip() if answers else None), text


MEGABYTE = 1 << 20


@pytest.mark.attack
@pytest.mark.timeout(60, method="thread")
@pytest.mark.parametrize(
    ("unit", "action", "body"),
    [
        ("<tool_call>", None, None),  # never closed: no action, the text is one
        ("<answer>", None, None),
        ("\\boxed{x}<tool_call>", "\\boxed{x}", None),  # the boxes; the open tags are text
        ("<tool_call>\\boxed{</tool_call>", "<tool_call>\\boxed{</tool_call>", "\\boxed{"),
    ],
)
def test_splitting_a_megabyte_solution_is_linear(unit, action, body):
    """A ~1 MB solution string of unclosed tags kept ``spade env check`` busy for minutes
    (each regex search rescanned the rest of the text); found in milliseconds now, and found
    right: one action per closed block (``action``, the whole text when none is closed), the
    tool calls' bodies, and no answer (none is closed)."""
    n = MEGABYTE // len(unit)
    text = unit * n
    assert split_solution(text) == ([action] * n if action else [text])
    assert tool_call_bodies(text) == ([body] * n if body else [])
    assert extract_answer(text) is None


def test_bare_moves_are_boxed_and_actions_left_alone():
    from spade.envs.actions import box_moves

    assert box_moves(["12", "\\boxed{13}"]) == ["\\boxed{12}", "\\boxed{13}"]
    assert box_moves("go") == "\\boxed{go}"
    assert box_moves("\\boxed{a}\\boxed{b}") == "\\boxed{a}\\boxed{b}"
    assert box_moves([1, 2.5]) == ["\\boxed{1}", "\\boxed{2.5}"]  # numbers written out
    assert box_moves(7) == "\\boxed{7}"
    assert box_moves([True]) == [True]  # not moves: split_solution says what is wrong
    assert box_moves([["a"]]) == [["a"]]
