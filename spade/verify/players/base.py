"""The shared parts of the observation-only players: the Player base, its exceptions and helpers."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Any

from spade.verify.episodes import clip as clip  # re-exported: the players quote with it


class Abstain(Exception):
    """The observation is not in the form the player reads: it cannot judge the design."""


class Contradiction(Exception):
    """What the player was told leaves no way to win (clues inconsistent with one another or
    with the opening's rules)."""


def need(pattern: str, text: str, what: str, flags: int = 0) -> re.Match[str]:
    """The first match of ``pattern`` in ``text``, or :class:`Abstain` naming ``what``."""
    found = re.search(pattern, text, flags)
    if found is None:
        raise Abstain(f"no {what} in {clip(text)}")
    return found


VALUE_END = r"(?=[.,;:!?](?:\s|$)|[ \t]*(?:\n|$)|[ \t]+\()"
"""Where a value the parent prints ends its clause: at punctuation and a space, at the end of
a line, or before a parenthesis of added detail. Not "1,024", "13.5", "8*a3 + ...", "12 per
ton": there the number is only part of what the design says."""

STANDALONE = r"(?<![\w'])(?<![-+*/=<>]\s)(?<![-+*/=<>])"
"""Before a term the parent's clue names (``f(2)``, ``t(3)``): not inside a word and not the
right-hand side of an operator, as in "t(3) - t(2) = 5" (which says nothing of t(2) alone)."""


def box(move: object) -> str:
    return "\\boxed{" + str(move) + "}"


def call(tool: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


class Player:
    """One episode's player: ``opening`` reads the task text and makes the first move,
    ``reply`` reads each later observation and makes the next move."""

    def __call__(self, turn: int, observation: str) -> str:
        try:
            return self.opening(observation) if turn == 0 else self.reply(observation)
        except (LookupError, TypeError, ValueError, AttributeError, ArithmeticError) as exc:
            # a value in an unexpected shape (a tool result without the key it reads, a count
            # that is no number): the design's feedback is not what this player reads
            raise Abstain(f"{type(exc).__name__} reading {clip(observation)}: {exc}") from None

    def opening(self, text: str) -> str:
        raise NotImplementedError

    def reply(self, text: str) -> str:
        raise NotImplementedError


def solve(points: list[tuple[int, int]], degree: int) -> list[Fraction] | None:
    """Coefficients, highest first, of the polynomial of ``degree`` through the first
    ``degree + 1`` points (Gaussian elimination in exact fractions); None if singular."""
    rows = [
        [Fraction(x) ** (degree - k) for k in range(degree + 1)] + [Fraction(y)]
        for x, y in points[: degree + 1]
    ]
    n = degree + 1
    for col in range(n):
        pivot = next((r for r in range(col, n) if rows[r][col] != 0), None)
        if pivot is None:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [rows[k][n] / rows[k][k] for k in range(n)]
