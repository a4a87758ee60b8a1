"""Reading the jail's replies on the host: total and linear.

A design shares its interpreter with the jail's server, so it can rewrite the server's encoder
and put anything on the channel: JSON nested 100,000 deep, integers of thousands of digits,
NaN, a list where an object belongs. Everything here turns such bytes into a :class:`BadReply`
(the session makes it a ``protocol`` failure) or a ``contract`` :class:`EnvFailure` (a result
of the wrong shape), and raises nothing else. Each step is linear in the reply: C-speed byte
operations and patterns without backtracking, a bounded number of passes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from spade.metrics import prom
from spade.records import Failure, FailureKind
from spade.sandbox.failures import EnvFailure, classify_exception

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects a reply may have. The envelope and a step's result
take 3 levels (``{"result": [obs, reward, ..., {info}]}``), a tool schema 6; real info dicts
and schemas use a handful more. Bounded before decoding, so neither the decoder nor any host
code that later walks the value (``repr``, ``json.dumps``, a schema validator) can recurse
without bound."""

REWARD_RANGE = (-1.0, 1.0)
"""The contract's reward range (docs/architecture.md §3; ``sandbox.verify.reward_min``/``_max``)."""

# A JSON string from its opening quote: always matches (to its closing quote, or to the end of
# the reply when unterminated, which the decoder then rejects), so it never backtracks.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NON_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")
_DECODE_ERRORS = (ValueError, RecursionError, MemoryError)
"""What ``json.loads`` raises on hostile bytes: ValueError for bad JSON, bad UTF-8 and an int
over the digit limit; RecursionError and MemoryError as a last resort behind the depth bound."""


class BadReply(Exception):
    """A reply that is not the protocol's JSON envelope; the message says why."""


@dataclass
class SessionInfo:
    """What the jail reported after loading the code."""

    class_name: str
    tool_use: bool
    accepts_options: bool
    hint: str | None
    skill: str | None
    max_turns: int | None


def nesting_exceeds(line: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text ``line`` nests arrays and objects deeper than ``limit``. Strings
    are cut out first, then everything but brackets; each pass of ``replace`` removes the
    innermost level, so at most ``limit`` passes. Brackets that do not pair up are left to the
    decoder, which rejects them."""
    if line.count(b"[") + line.count(b"{") <= limit:  # too few to nest deeper (most replies)
        return False
    brackets = _STRING.sub(b"", line).translate(_SQUARE, _NON_BRACKETS)
    for done in range(limit):
        if not brackets:
            return False
        if b"[" * (limit - done + 1) in brackets:  # a run of opening brackets that deep: no
            return True  # need to peel it level by level (100,000 deep is found at once)
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):  # brackets that cannot pair: the decoder says so
            return False
        brackets = shorter
    return bool(brackets)


def decode(line: bytes) -> Any:
    """The JSON value of one reply line, or BadReply."""
    if nesting_exceeds(line):
        raise BadReply(f"reply nests deeper than {MAX_DEPTH} levels: {line[:120]!r}")
    try:
        return json.loads(line)
    except _DECODE_ERRORS as exc:  # forged or corrupted channel: the session cannot be trusted
        raise BadReply(f"unparseable reply ({type(exc).__name__}): {line[:200]!r}") from None


def _clip(value: Any, limit: int = 200) -> str:
    return str(value)[:limit]  # bounded depth and digits: str() of a decoded value is total


def _optional(value: Any, kind: type) -> bool:
    return value is None or (isinstance(value, kind) and not isinstance(value, bool))


def envelope(line: bytes, rid: int) -> dict[str, Any]:
    """The decoded reply to request ``rid``, its envelope checked field by field: ``ok`` a
    bool, the ``id`` echoed, ``denied`` a list of strings, ``error`` a well-formed report."""
    reply = decode(line)
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise BadReply(f"malformed reply: {_clip(reply)}")
    if reply.get("id") != rid:  # a stale or forged reply: the channel is out of step
        raise BadReply(f"reply to request {_clip(reply.get('id'), 40)}, not {rid}")
    denied = reply.get("denied")
    if denied is not None and not (
        isinstance(denied, list) and all(isinstance(d, str) for d in denied)
    ):
        raise BadReply(f"malformed list of denied imports: {_clip(denied)}")
    if not reply["ok"]:
        error = reply.get("error")
        if not (
            isinstance(error, dict)
            and isinstance(error.get("type", ""), str)
            and isinstance(error.get("message", ""), str)
            and _optional(error.get("errno"), int)
            and _optional(error.get("traceback"), str)
        ):
            raise BadReply(f"malformed error report: {_clip(error)}")
    return reply


def session_info(result: Any) -> SessionInfo:
    """What ``load`` answered; the design's own attributes that are not of their type are
    dropped (the server already does so, unless the design rewrote it)."""
    if not isinstance(result, dict):
        raise BadReply(f"malformed load reply: {_clip(result)}")

    def text(key: str) -> str | None:
        value = result.get(key)
        return value if isinstance(value, str) else None

    max_turns = result.get("max_turns")
    return SessionInfo(
        class_name=text("class") or "?",
        tool_use=result.get("tool_use") is True,
        accepts_options=result.get("accepts_options") is True,
        hint=text("hint"),
        skill=text("skill"),
        max_turns=max_turns if _optional(max_turns, int) else None,
    )


def failure_from_error(error: dict[str, Any], *, load: bool, encode: bool) -> Failure:
    """The classified failure of an error report (already checked by :func:`envelope`), its
    texts cut to what the jail's own server sends (a rewritten one could send a megabyte)."""
    exc_type = str(error.get("type", "Exception"))[:200]
    message = str(error.get("message", ""))[:2000]
    tb = error.get("traceback")
    tb = tb[-8000:] if tb else None
    if encode:
        return Failure(FailureKind.CONTRACT, f"result is not JSON-serialisable: {message}", tb)
    if load and exc_type == "SyntaxError":
        return Failure(FailureKind.SYNTAX, message, tb)
    if load and exc_type == "LookupError":
        return Failure(FailureKind.CONTRACT, message, tb)
    kind = classify_exception(exc_type, error.get("errno"), message)
    return Failure(kind, f"{exc_type}: {message}", tb)


def contract(reason: str) -> EnvFailure:
    """A result of the wrong shape: the environment broke its contract (not fatal)."""
    prom.record_failure(FailureKind.CONTRACT)  # every contract failure is built here
    return EnvFailure(Failure(FailureKind.CONTRACT, reason), fatal=False)


def check_reset(result: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(result, list) or len(result) != 2:
        raise contract(f"reset() must return (observation, info), got {_clip(result, 120)}")
    obs, info = result
    if not isinstance(obs, str):
        raise contract(f"reset() observation must be str, got {type(obs).__name__}")
    if not isinstance(info, dict):
        raise contract(f"reset() info must be dict, got {type(info).__name__}")
    return obs, info


def check_step(
    result: Any, reward_range: tuple[float, float] = REWARD_RANGE
) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """A step's 5-tuple, its reward finite and within ``reward_range``."""
    if not isinstance(result, list) or len(result) != 5:
        raise contract(f"step() must return a 5-tuple, got {_clip(result, 120)}")
    obs, reward, terminated, truncated, info = result
    if not isinstance(obs, str):
        raise contract(f"step() observation must be str, got {type(obs).__name__}")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise contract(f"step() reward must be a number, got {type(reward).__name__}")
    # An int is compared exactly (float() of 10**400 would overflow); a float must be finite.
    if isinstance(reward, float) and not math.isfinite(reward):
        raise contract(f"step() reward must be finite, got {reward}")
    low, high = reward_range
    if not low <= reward <= high:
        raise contract(f"reward {_clip(reward, 40)} outside [{low:g}, {high:g}]")
    if not isinstance(terminated, bool) or not isinstance(truncated, bool):
        raise contract("step() terminated and truncated must be bool")
    if not isinstance(info, dict):
        raise contract(f"step() info must be dict, got {type(info).__name__}")
    return obs, float(reward), terminated, truncated, info
