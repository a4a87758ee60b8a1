"""Parsing of agent actions: ``\\boxed{}`` moves, ``<tool_call>`` JSON and ``<answer>`` blocks.

Standard library only, Python 3.11 compatible: this module is imported inside the jail.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BLOCK_RE = re.compile(r"<tool_call>.*?</tool_call>|<answer>.*?</answer>|\\boxed\{", re.DOTALL)


def _boxed_span(text: str, start: int) -> tuple[str, int] | None:
    """Content of the ``\\boxed{`` at ``start`` (braces balanced) and the index after it."""
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j], j + 1
    return None


def extract_all_boxed(text: str) -> list[str]:
    """Every ``\\boxed{...}`` content in ``text``, in order (nested braces kept)."""
    out: list[str] = []
    pos = text.find("\\boxed{")
    while pos != -1:
        span = _boxed_span(text, pos)
        if span is None:
            break
        out.append(span[0])
        pos = text.find("\\boxed{", span[1])
    return out


def extract_boxed(text: str) -> str | None:
    """The last ``\\boxed{...}`` content, stripped, or None when there is none."""
    found = extract_all_boxed(text)
    return found[-1].strip() if found else None


def extract_answer(text: str) -> str | None:
    """The last ``<answer>...</answer>`` content, stripped, or None."""
    found = _ANSWER_RE.findall(text)
    return found[-1].strip() if found else None


class ToolCallError(ValueError):
    """A ``<tool_call>`` block that is not ``{"name": str, "arguments": dict}`` JSON."""


def parse_tool_call(body: str) -> tuple[str, dict[str, Any]]:
    """Parse one tool-call body into ``(name, arguments)``; raise ToolCallError with a reason."""
    try:
        data = json.loads(body)
    except ValueError as exc:  # json.JSONDecodeError: the model wrote bad JSON
        raise ToolCallError(f"tool call is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ToolCallError('tool call must be an object with a string "name"')
    args = data.get("arguments", {})
    if isinstance(args, str):  # some chat templates serialise arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            raise ToolCallError("tool call arguments string is not valid JSON") from None
    if not isinstance(args, dict):
        raise ToolCallError('tool call "arguments" must be an object')
    return data["name"], args


def tool_call_bodies(text: str) -> list[str]:
    """The raw bodies of every ``<tool_call>`` block, in order."""
    return [b.strip() for b in _TOOL_CALL_RE.findall(text)]


def split_solution(solution: Any) -> list[str]:
    """Normalise a ``solution()`` result into a list of action strings.

    A list (or tuple) is taken as the actions. A single string is split into its
    ``\\boxed{...}``, ``<tool_call>...</tool_call>`` and ``<answer>...</answer>`` blocks in
    order; a string without any block is one action. Anything else raises TypeError.
    """
    if isinstance(solution, (list, tuple)):
        if not all(isinstance(a, str) for a in solution):
            raise TypeError("solution() list must contain only strings")
        return list(solution)
    if not isinstance(solution, str):
        raise TypeError(
            f"solution() must return a list of str or a str, got {type(solution).__name__}"
        )
    actions: list[str] = []
    pos = 0
    while True:
        m = _BLOCK_RE.search(solution, pos)
        if m is None:
            break
        if m.group(0) == "\\boxed{":
            span = _boxed_span(solution, m.start())
            if span is None:
                break
            actions.append("\\boxed{" + span[0] + "}")
            pos = span[1]
        else:
            actions.append(m.group(0))
            pos = m.end()
    return actions or [solution]
