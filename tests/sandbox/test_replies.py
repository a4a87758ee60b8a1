"""Reading the jail's replies: whatever bytes come back, the host gets a failure, never a crash."""

import json

import pytest

from spade.records import FailureKind
from spade.sandbox.failures import EnvFailure
from spade.sandbox.replies import (
    MAX_DEPTH,
    BadReply,
    check_step,
    decode,
    envelope,
    nesting_exceeds,
    session_info,
)


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    ("line", "deeper"),
    [
        (_nested(MAX_DEPTH), False),
        (_nested(MAX_DEPTH + 1), True),
        (b'{"a": [1, {"b": [[]]}], "c": "]]]]"}', False),  # brackets in strings do not count
        (b'["' + b"[" * 1000 + b'"]', False),
        (b'["\\"' + b"[" * 1000 + b'"]', False),  # an escaped quote does not end the string
        (b'{"a": "\\\\"' + b"[" * 65 + b"]" * 65 + b"}", True),  # an escaped backslash does not
        (b'"unterminated [[[[', False),  # no brackets outside strings; the decoder rejects it
        (b"]]][[[", False),  # cannot pair: left to the decoder
        (b"[[][" * 64 + b"]]" * 64, True),  # deep without a long run of opening brackets
        (b"", False),
    ],
)
def test_nesting_bound_reads_like_the_decoder(line, deeper):
    assert nesting_exceeds(line) is deeper


@pytest.mark.attack
@pytest.mark.timeout(60, method="thread")
@pytest.mark.parametrize(
    ("line", "deeper"),
    [
        (_nested(500_000), True),  # 1 MB of brackets: one pass per level, stopped after 64
        (b'"\\"' * 350_000, False),  # quotes that each open an unterminated string after an escape
        (b"[" * 1_000_000, True),
        (b'["' + b"x" * 1_000_000 + b'"]', False),  # one level around a megabyte of string
    ],
    ids=["deep", "escaped-quotes", "open", "long-string"],
)
def test_nesting_bound_is_linear_on_a_megabyte(line, deeper):
    """Each would take minutes with a quadratic scan (a pattern that backtracks, a rescan per
    bracket); linear, each is milliseconds (see the report). The answers are right too: the
    deep and the open lines nest past MAX_DEPTH, the string-only ones do not nest at all."""
    assert nesting_exceeds(line) is deeper


@pytest.mark.attack
@pytest.mark.parametrize(
    ("line", "says"),
    [
        (_nested(100_000), "deeper than 64"),  # json.loads: RecursionError, not ValueError
        (b'{"ok": true, "id": 1, "result": ' + b"9" * 5000 + b"}", "ValueError"),  # digit limit
        (b"\xff\xfe", "unparseable"),
        (b"{", "unparseable"),
        (b"[" * 1_000_000, "deeper than 64"),  # a run of opening brackets that never close
    ],
)
def test_decode_turns_every_hostile_reply_into_bad_reply(line, says):
    with pytest.raises(BadReply, match=says):
        decode(line)


@pytest.mark.attack
@pytest.mark.parametrize(
    "reply",
    [
        [],
        {"ok": 1, "id": 1},
        {"ok": True, "id": 2},
        {"ok": True, "id": 1, "denied": "os"},
        {"ok": True, "id": 1, "denied": [["os"]]},
        {"ok": False, "id": 1, "error": ["x"]},
        {"ok": False, "id": 1, "error": {"type": ["x"]}},
        {"ok": False, "id": 1, "error": {"errno": {"x": 1}}},  # unhashable: crashed the lookup
        {"ok": False, "id": 1, "error": {"errno": True}},
        {"ok": False, "id": 1, "error": {"traceback": 3}},
        {"ok": False, "id": 1},
    ],
)
def test_envelope_rejects_every_field_of_the_wrong_type(reply):
    with pytest.raises(BadReply):
        envelope(json.dumps(reply).encode(), 1)


def test_envelope_passes_well_formed_replies():
    ok = {"ok": True, "id": 1, "result": [1], "denied": ["os"]}
    assert envelope(json.dumps(ok).encode(), 1) == ok
    error = {"ok": False, "id": 1, "error": {"type": "E", "message": "m", "errno": 2}}
    assert envelope(json.dumps(error).encode(), 1) == error


@pytest.mark.attack
def test_load_info_of_the_wrong_shape():
    with pytest.raises(BadReply):
        session_info(["EnvClass"])
    info = session_info({"class": ["x"], "tool_use": "yes", "hint": 3, "max_turns": 2.5})
    assert (info.class_name, info.tool_use, info.hint, info.max_turns) == ("?", False, None, None)
    info = session_info({"class": "AEnv", "tool_use": True, "hint": "h", "max_turns": 9})
    assert (info.class_name, info.tool_use, info.hint, info.max_turns) == ("AEnv", True, "h", 9)


@pytest.mark.attack
@pytest.mark.parametrize(
    ("reward", "says"),
    [
        (10**400, "outside"),  # math.isfinite(10**400) raised OverflowError in the host
        (-(10**400), "outside"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (1.5, "outside"),
        (True, "number"),
        ("1", "number"),
    ],
    ids=["int-401-digits", "negative-int-401-digits", "nan", "inf", "1.5", "bool", "str"],
)
def test_step_rewards_that_are_not_finite_numbers_in_range(reward, says):
    line = json.dumps({"ok": True, "id": 1, "result": ["o", reward, True, False, {}]})
    result = envelope(line.encode(), 1)["result"]  # NaN and Infinity decode: Python's json
    with pytest.raises(EnvFailure, match=says) as exc:
        check_step(result)
    assert exc.value.failure.kind is FailureKind.CONTRACT and not exc.value.fatal


def test_step_reward_range_is_the_callers():
    assert check_step(["o", 5, True, False, {}], (-10.0, 10.0))[1] == 5.0
    assert check_step(["o", -1, True, False, {}])[1] == -1.0
