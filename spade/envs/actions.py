"""Parsing of agent actions: ``\\boxed{}`` moves, ``<tool_call>`` JSON and ``<answer>`` blocks.

Standard library only, Python 3.11 compatible: this module is imported inside the jail.
The host runs :func:`split_solution` on what a design's ``solution()`` returned, so every
parser here is linear in its text: ``str.find`` loops, no pattern that can backtrack (a lazy
``<tool_call>.*?</tool_call>`` rescans the rest of the text from every unclosed opening tag:
quadratic).
"""

from __future__ import annotations

import json
import re
from typing import Any

_BRACES = re.compile(r"[{}]")
TOOL_CALL = ("<tool_call>", "</tool_call>")
ANSWER = ("<answer>", "</answer>")
_BOXED = "\\boxed{"


def _boxed_span(text: str, start: int) -> tuple[str, int] | None:
    """Content of the ``\\boxed{`` at ``start`` (braces balanced) and the index after it."""
    i = start + len(_BOXED)
    depth = 1
    for brace in _BRACES.finditer(text, i):  # visits the braces only
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[i : brace.start()], brace.end()
    return None


class Finder:
    """``text.find(needle, x)`` for non-decreasing ``x``, remembering the last answer: a search
    never rescans what an earlier one passed over, so all of them together are linear."""

    def __init__(self, text: str, needle: str) -> None:
        self.text, self.needle = text, needle
        self.since, self.at = 0, -2  # the first match at or after ``since`` is ``at``

    def find(self, x: int) -> int:
        if not (self.since <= x and (x <= self.at or self.at == -1)):
            self.since, self.at = x, self.text.find(self.needle, x)
        return self.at


class BlockFinder:
    """The first ``open ... close`` block at or after a position, for non-decreasing
    positions: the earliest opening tag whose closing tag follows, closed by the nearest one
    (what ``re.search("<a>.*?</a>|<b>.*?</b>", text, pos)`` finds), in linear time overall."""

    def __init__(self, text: str, kinds: tuple[tuple[str, str], ...]) -> None:
        self.kinds = [(len(o), len(c), Finder(text, o), Finder(text, c)) for o, c in kinds]

    def first(self, pos: int) -> tuple[int, int] | None:
        """``(start, end)`` of the first block at or after ``pos``, or None."""
        best: tuple[int, int] | None = None
        for n_open, n_close, opening, closing in self.kinds:
            start = opening.find(pos)
            end = closing.find(start + n_open) if start != -1 else -1
            if end != -1 and (best is None or start < best[0]):
                best = (start, end + n_close)
        return best


def blocks(text: str, kinds: tuple[tuple[str, str], ...]) -> list[tuple[int, int]]:
    """``(start, end)`` of every block of the given kinds in ``text``, in order (what
    ``re.findall`` with a lazy ``open.*?close`` alternative per kind finds), in linear time."""
    found: list[tuple[int, int]] = []
    finder = BlockFinder(text, kinds)
    while (block := finder.first(found[-1][1] if found else 0)) is not None:
        found.append(block)
    return found


def _bodies(text: str, kind: tuple[str, str]) -> list[str]:
    return [text[start + len(kind[0]) : end - len(kind[1])] for start, end in blocks(text, (kind,))]


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
    found = _bodies(text, ANSWER)
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
    return [b.strip() for b in _bodies(text, TOOL_CALL)]


def box_moves(solution: Any) -> Any:
    """A game's ``solution()`` with its bare moves boxed: each string of a list (or a lone
    string) that holds no ``\\boxed{`` becomes ``\\boxed{move}``, the action an agent sends
    for it, and a number (``[self.secret]``) is first written out. Small models return the
    moves themselves where the contract asks for actions; the reference play is the harness's
    to format, as the prelude's imports are.
    Anything else is returned as it is (:func:`split_solution` judges it)."""
    if _is_number(solution):
        solution = str(solution)
    if isinstance(solution, str):
        return solution if _BOXED in solution else _BOXED + solution + "}"
    if isinstance(solution, list | tuple) and all(
        isinstance(a, str) or _is_number(a) for a in solution
    ):
        moves = [a if isinstance(a, str) else str(a) for a in solution]
        return [a if _BOXED in a else _BOXED + a + "}" for a in moves]
    return solution


def _is_number(value: Any) -> bool:
    """An int or float move (``[self.secret]``): written as an agent writes it, ``str()``.
    A bool is not one (``True`` as a move is a mistake to report, not to spell)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


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
    tagged, boxes = BlockFinder(solution, (TOOL_CALL, ANSWER)), Finder(solution, _BOXED)
    pos = 0
    while True:
        block, boxed = tagged.first(pos), boxes.find(pos)
        if block is not None and (boxed == -1 or block[0] < boxed):
            actions.append(solution[block[0] : block[1]])
            pos = block[1]
        elif boxed != -1:
            span = _boxed_span(solution, boxed)
            if span is None:
                break
            actions.append(_BOXED + span[0] + "}")
            pos = span[1]
        else:
            break
    return actions or [solution]
