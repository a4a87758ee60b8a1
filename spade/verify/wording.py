"""Is one game's feedback another's reworded? The one-to-one map of observations, and its evidence.

Two games played side by side with the same seeds and moves are the same game reworded when
their observations correspond one to one ("too low" for "higher", even a lie told the same way
every time): a player told the one learns exactly what the other tells. A clue of another kind
splits or merges what the other tells apart. Two kinds of evidence tell them apart:

- **Texts**: the map of whole observations (the move echoed back masked) must be one to one.
  It is tested only where an observation recurs, so it needs a sample in which the same
  reference observation meets different hidden states (a clue that adds "within 50" maps one
  to one on seeds where the reference's "lower" happened to be near every time).
- **Numbers**: observations that recur rarely (a position, a counter) are compared by their
  template (digit runs masked) and numbers. A reworded game shows the numbers the reference
  shows; a number of the design is new information unless, across the occurrences of its
  template pair, it is constant or follows (plus or minus a fixed offset, either sign) a
  number the player already has: in the reference's observation, in its own move, or the turn
  count. A maze that names the distance to the exit shows a number nothing else explains.

A number given as words, or computed otherwise (a ratio, a 1-based cell index), is counted as
new: the check errs on the side of novelty, where the cost of a mistake is one more game.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_NUMBER = re.compile(r"-?\d{1,15}")  # bounded runs: int() of a huge run is slow or refused
_WORD = re.compile(r"\w+")
_INTEGER = re.compile(r"[+-]?\d{1,15}")
_MOVE_CHARS = 400  # of a move, searched for echoes (a 20,000-character move is garbage)
MAX_NUMBERS = 32
"""Numbers of one observation compared (the first ones): bounds the slot search."""
MAX_OCCURRENCES = 64
"""Occurrences of one template pair kept: enough to break a coincidence, bounded memory."""


def unechoed(mine: str, theirs: str, move: str) -> tuple[str, str]:
    """Two observations of one move without the move repeated back: the player knows what it
    played ("500 is too low" and "Too low" tell it the same). Each word of the move that both
    repeat (a name, a pet, a query's point) is masked in both: "No: Ana does not own the cat"
    is then one text whoever was asked about. A move with a digit (a guess, a code; a number
    also as its value, "037" as 37) is masked whole in each that repeats it. Whole words only,
    in any case; a word only one of them repeats is kept, since a random move drawn from one
    game's text ("step") is in that game's next text by chance, not as an echo."""
    for word in sorted(set(_WORD.findall(move[:_MOVE_CHARS])), key=len, reverse=True)[:16]:
        if len(word) < 2:
            continue
        echo = _whole(word)
        if echo.search(mine) and echo.search(theirs):
            mine, theirs = echo.sub("<move>", mine), echo.sub("<move>", theirs)
    if any(ch.isdigit() for ch in move):
        forms = {move[:_MOVE_CHARS]}
        if _INTEGER.fullmatch(move.strip()):  # a guess "037" is repeated back as 37
            forms.add(str(int(move)))
        for form in forms:
            echo = _whole(form)
            mine, theirs = echo.sub("<move>", mine), echo.sub("<move>", theirs)
    return mine, theirs


def _whole(text: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(text)}(?!\w)", re.IGNORECASE)


def template(text: str) -> tuple[str, tuple[int, ...]]:
    """``text`` with its digit runs masked as ``#``, and the first numbers in it."""
    numbers = tuple(int(n) for n in _NUMBER.findall(text)[:MAX_NUMBERS])
    return _NUMBER.sub("#", text), numbers


@dataclass(frozen=True)
class Occurrence:
    """One step's numbers: the design's, and what the player knows besides (the reference's
    numbers, then the turn, then the move's numbers), with where it was seen and the texts."""

    mine: tuple[int, ...]
    known: tuple[int, ...]
    where: str
    text: str
    theirs: str


def follows(values: Sequence[int], known: Sequence[Sequence[int]]) -> bool:
    """Whether ``values`` (one slot over several occurrences) is constant or follows one
    column of ``known`` plus or minus a fixed offset."""
    if len(set(values)) <= 1:
        return True
    width = min(len(k) for k in known)
    for i in range(width):
        column = [k[i] for k in known]
        if len({v - c for v, c in zip(values, column, strict=True)}) == 1:
            return True
        if len({v + c for v, c in zip(values, column, strict=True)}) == 1:
            return True
    return False


def unexplained(occurrences: Sequence[Occurrence]) -> tuple[int, Occurrence] | None:
    """The first slot of the design's numbers, and an occurrence showing it, that follows
    nothing the player knows over these occurrences of one template pair; None when every
    slot does (always so for a single occurrence: it is no evidence)."""
    if len(occurrences) < 2:
        return None
    known = [o.known for o in occurrences]
    for slot in range(len(occurrences[0].mine)):
        values = [o.mine[slot] for o in occurrences]
        if not follows(values, known):
            first = occurrences[0].mine[slot]
            return slot, next(o for o in occurrences if o.mine[slot] != first)
    return None


class Wording:
    """A one-to-one correspondence between two games' observations, grown as they are compared
    (see the module docstring), and the numbers seen per template pair."""

    def __init__(self) -> None:
        self._mine: dict[str, str] = {}
        self._theirs: dict[str, str] = {}
        self._numbers: dict[tuple[str, str], list[Occurrence]] = {}
        self.relabelled = False

    def matches(self, mine: str, theirs: str) -> bool:
        """Whether ``mine`` may stand for ``theirs`` given every pair matched before."""
        ok = self._mine.setdefault(mine, theirs) == theirs
        ok = self._theirs.setdefault(theirs, mine) == mine and ok
        self.relabelled |= mine != theirs
        return ok

    def record(self, mine: str, theirs: str, turn: int, move: str, where: str) -> None:
        """Keep the numbers of one step's observations (``move`` is the action's content)."""
        if mine == theirs:  # the same text: nothing it shows is new
            return
        shape, numbers = template(mine)
        their_shape, their_numbers = template(theirs)
        known = (*their_numbers, turn, *template(move)[1])
        seen = self._numbers.setdefault((shape, their_shape), [])
        if len(seen) < MAX_OCCURRENCES:
            seen.append(Occurrence(numbers, known, where, mine, theirs))

    def new_number(self) -> str:
        """Where the design showed a number that follows nothing the player knows (see the
        module docstring), as a reason; empty when none did."""
        for occurrences in self._numbers.values():
            found = unexplained(occurrences)
            if found is not None:
                slot, seen = found
                return (
                    f"{seen.where}: its observation {_clip(seen.text)} shows the number"
                    f" {seen.mine[slot]}, which follows nothing in the reference's"
                    f" {_clip(seen.theirs)}, the move or the turn (over"
                    f" {len(occurrences)} such steps)"
                )
        return ""


def _clip(text: str, limit: int = 90) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
