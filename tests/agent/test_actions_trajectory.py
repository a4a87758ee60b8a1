import pytest

from spade.agent.actions import bare_tool_calls, extract_action
from spade.records import Trajectory, Turn


def test_game_action_is_the_last_box_rewrapped():
    assert (
        extract_action("first \\boxed{1} then \\boxed{ {2} }", tool_use=False) == "\\boxed{ {2} }"
    )
    assert extract_action("no move here", tool_use=False) == "no move here"


def test_tool_use_action_keeps_calls_in_order_or_the_answer():
    text = 'x <tool_call>{"name": "a"}</tool_call> y <tool_call>{"name": "b"}</tool_call> <answer>7</answer>'
    assert (
        extract_action(text, tool_use=True)
        == '<tool_call>{"name": "a"}</tool_call>\n<tool_call>{"name": "b"}</tool_call>'
    )
    assert extract_action("so <answer>7</answer>", tool_use=True) == "<answer>7</answer>"
    assert extract_action("thinking", tool_use=True) == "thinking"


def test_lenient_reads_a_plain_move_as_the_last_line():
    reply = "Here's my move:\n\nToggle 1 4 5.\n"
    assert extract_action(reply, tool_use=False) == reply  # strict: the env's format message
    lenient = extract_action(reply, tool_use=False, action_format="lenient")
    assert lenient == "\\boxed{Toggle 1 4 5.}"
    boxed = "I try \\boxed{toggle 2} first\nthen more words"
    assert extract_action(boxed, tool_use=False, action_format="lenient") == "\\boxed{toggle 2}"
    assert extract_action(" \n ", tool_use=False, action_format="lenient") == " \n "


def test_lenient_reads_bare_and_fenced_json_tool_calls():
    reply = (
        'I will look it up.\n```json\n{"name": "get_order", "arguments": {"order_id": "O-1"}}\n```'
        '\n{"name": "get_product", "arguments": {"sku": "S-{2}"}} and {not json} {"no_name": 1}'
    )
    assert extract_action(reply, tool_use=True) == reply
    assert extract_action(reply, tool_use=True, action_format="lenient") == (
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "O-1"}}</tool_call>\n'
        '<tool_call>{"name": "get_product", "arguments": {"sku": "S-{2}"}}</tool_call>'
    )
    # a reply with the protocol's blocks is read as strict reads it
    tagged = '<tool_call>{"name": "a"}</tool_call> {"name": "b"}'
    assert extract_action(tagged, tool_use=True, action_format="lenient") == (
        '<tool_call>{"name": "a"}</tool_call>'
    )
    assert extract_action("no idea", tool_use=True, action_format="lenient") == "no idea"


def _turn(prompt, completion, reward=0.0, terminated=False):
    return Turn(
        prompt,
        completion,
        [-0.5] * len(completion),
        "t",
        "a",
        "o",
        reward,
        terminated,
        False,
        "stop",
        0.0,
        0.0,
    )


def test_return_rule_and_success():
    t = Trajectory(
        "e",
        0,
        False,
        turns=[_turn([1], [2]), _turn([1, 2, 3], [4], reward=1.7, terminated=True)],
        status="terminated",
    )
    assert t.episode_return() == 1.0 and t.success(1.0)
    t.status = "turn_limit"
    assert t.episode_return() == 0.0 and not t.success(1.0)
    assert Trajectory("e", 0, False).episode_return() == 0.0


def test_token_view_masks_observations_when_prefix_stable():
    t = Trajectory("e", 0, False, turns=[_turn([1, 2], [3, 4]), _turn([1, 2, 3, 4, 5], [6])])
    ids, mask, lps = t.token_view()
    assert ids == [1, 2, 3, 4, 5, 6]
    assert mask == [0, 0, 1, 1, 0, 1]
    assert lps == [0.0, 0.0, -0.5, -0.5, 0.0, -0.5]
    broken = Trajectory("e", 0, False, turns=[_turn([1, 2], [3]), _turn([9, 9, 9, 9], [6])])
    assert broken.token_view() is None


def test_trajectory_round_trips_through_its_dict():
    t = Trajectory(
        "e",
        3,
        True,
        hint="h",
        turns=[_turn([1], [2], reward=0.5, terminated=True)],
        status="terminated",
        failure=None,
    )
    again = Trajectory.from_dict(t.to_dict())
    assert again == t and again.episode_return() == 0.5


# -- linear time and no crash on model-supplied text (issue 12) --------------------------------

MEGABYTE = 1 << 20


@pytest.mark.attack
@pytest.mark.timeout(60, method="thread")
@pytest.mark.parametrize("unit", ["<tool_call>", "<answer>", "\\boxed{"])
def test_action_extraction_from_a_megabyte_reply_is_linear(unit):
    """The lazy ``<tool_call>.*?</tool_call>|<answer>.*?</answer>`` rescanned the rest of the
    reply from every unclosed tag: quadratic."""
    text = unit * (MEGABYTE // len(unit))
    assert extract_action(text, tool_use=True, action_format="lenient") == text
    assert extract_action(text, tool_use=False) == text


@pytest.mark.attack
@pytest.mark.timeout(60, method="thread")
@pytest.mark.parametrize(
    "text",
    [
        '{"a":' * 200_000,  # raw_decode from every brace: RecursionError in the host
        ('{"a":' * 500 + "0 ") * 400,  # 500 deep, never closed: each brace rescanned it
        '{"a": ' + "9" * 5000 + "}",  # an int over the digit limit: a ValueError, no position
        '{"' * (1 << 17),  # a failed decode per brace: json's error counted the lines before it
    ],
    ids=["deep", "unclosed", "huge-int", "quoted-braces"],
)
def test_bare_tool_calls_in_hostile_text_neither_crash_nor_take_quadratic_time(text):
    assert bare_tool_calls(text) == []
    assert extract_action(text, tool_use=True, action_format="lenient") == text


def test_bare_tool_calls_after_broken_json_are_still_found():
    text = 'try {"name": oops} then {"name": "look", "arguments": {}} {x}'
    assert bare_tool_calls(text) == ['{"name": "look", "arguments": {}}']


@pytest.mark.parametrize("size", [10, 250, 260, 5000])
def test_bare_tool_calls_longer_than_the_first_window(size):
    import json

    call = json.dumps(
        {"name": "note", "arguments": {"text": "y" * size, "n": 10 ** min(size, 1000)}}
    )
    assert bare_tool_calls(f"write {call} {{") == [call]
    long_number = json.dumps({"name": "n", "arguments": {"v": 1}}).replace(
        "1", "1" * min(size, 4000)
    )
    assert bare_tool_calls("{ " * 3 + long_number) == [long_number]


def test_the_search_for_bare_calls_gives_up_after_many_broken_objects():
    from spade.agent.actions import MAX_BROKEN_OBJECTS

    call = '{"name": "look", "arguments": {}}'
    few = '{"a" ' * MAX_BROKEN_OBJECTS
    assert bare_tool_calls(few + call) == [call]
    assert bare_tool_calls(few + '{"a" ' + call) == []  # one broken object too many
