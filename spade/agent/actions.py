"""Turning an agent's reply into the action sent to ``step()``.

Two formats, by ``evaluation.action_format``. ``strict`` (the reference): only the protocol's
blocks count. ``lenient`` also reads the plain intent a small model writes without them: a
game reply with no ``\\boxed{}`` is its last non-empty line as the move; a tool-use reply with
no ``<tool_call>`` or ``<answer>`` block is its JSON objects that name a tool (bare, or in a
```json fence) as calls. Only the action changes: the trained tokens are the reply as written.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from spade.envs.actions import ANSWER, TOOL_CALL, blocks, extract_all_boxed

ActionFormat = Literal["strict", "lenient"]

_DECODER = json.JSONDecoder()
_OBJECT_WITH_KEY = re.compile(r'\{\s*"')
MAX_BROKEN_OBJECTS = 1024
"""Objects that do not parse before the search for bare calls gives up: each costs a decode
(microseconds), so a megabyte of ``{"`` took about a second; a reply that holds a thousand
broken objects before its call is not a call worth finding."""


def extract_action(text: str, *, tool_use: bool, action_format: ActionFormat = "strict") -> str:
    """The action in ``text``.

    Games: the last ``\\boxed{...}`` (re-wrapped, so the environment parses it as always).
    Tool use: every ``<tool_call>`` block in order, or the ``<answer>`` if there is no call.
    Without any of these, ``strict`` sends the whole reply to the environment, which answers it
    with its invalid-format message (that is part of what the agent learns); ``lenient`` reads
    the reply as the module docstring says, and sends the whole reply only when that finds
    nothing either.
    """
    if tool_use:
        found = [text[start:end] for start, end in blocks(text, (TOOL_CALL, ANSWER))]
        calls = [b for b in found if b.startswith(TOOL_CALL[0])]
        if calls:
            return "\n".join(calls)
        if found:
            return found[-1]
        if action_format == "lenient" and (bare := bare_tool_calls(text)):
            return "\n".join(f"<tool_call>{call}</tool_call>" for call in bare)
        return text
    boxed = extract_all_boxed(text)
    if boxed:
        return "\\boxed{" + boxed[-1] + "}"
    if action_format == "lenient" and (last := _last_line(text)):
        return "\\boxed{" + last + "}"
    return text


def _last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped ("" when there is none)."""
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")


def bare_tool_calls(text: str) -> list[str]:
    """JSON objects in ``text`` with a string ``name``, re-serialised, in order (a JSON value
    that does not parse is skipped: the model's prose is full of braces).

    Linear in ``text``: after a value that does not parse, the search goes on from where the
    decoder gave up, not from the next brace (which rescanned the rest of ``{"a": {"a": ...``
    from every brace), so a call nested inside a broken object is not recovered; JSON nested
    too deep to decode (or an int too long to convert) ends the search, and so does the
    :data:`MAX_BROKEN_OBJECTS`-th object that does not parse."""
    calls: list[str] = []
    broken = 0
    pos = _next_object(text, 0)
    while pos != -1:
        try:
            value, end = _decode_at(text, pos)
        except _Broken as exc:  # prose or bad JSON: go on from where the decoder gave up
            broken += 1
            if broken > MAX_BROKEN_OBJECTS:
                break
            pos = _next_object(text, max(pos + 1, exc.at))
            continue
        # Nesting deeper than the interpreter recurses, or an int over the digit limit (a
        # ValueError without a position): not a call, and no place to resume from.
        except (RecursionError, ValueError):
            break
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            calls.append(json.dumps(value))
        pos = _next_object(text, end)
    return calls


def _next_object(text: str, pos: int) -> int:
    """Where the next object with a key starts (``{`` then a quote): a call has a ``name``, so
    other braces (``\\boxed{``, ``{}``, prose) are not worth decoding."""
    found = _OBJECT_WITH_KEY.search(text, pos)
    return found.start() if found else -1


class _Broken(Exception):
    def __init__(self, at: int) -> None:
        self.at = at


def _decode_at(text: str, pos: int) -> tuple[Any, int]:
    """The JSON value at ``pos`` and the index after it; _Broken with where it fails.

    Decodes a window that grows until the failure is not an artefact of its end: the error
    ``json`` raises counts the lines before its position, so decoding in ``text`` itself costs
    O(pos) per failure, quadratic over prose full of braces (``\\boxed{`` repeated)."""
    size = 64
    while True:
        window = text[pos : pos + size]
        try:
            value, end = _DECODER.raw_decode(window)
            return value, pos + end
        except json.JSONDecodeError as exc:
            cut = pos + size < len(text)
            if cut and (exc.pos >= len(window) - 8 or exc.msg.startswith("Unterminated")):
                size *= 4  # it may have read to the window's end: look further
                continue
            raise _Broken(pos + exc.pos) from None
