"""Players of the puzzle examples: maze walk, switchboard, sequence oracle, ownership riddle."""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Callable
from fractions import Fraction

from spade.verify.players.base import (
    STANDALONE,
    VALUE_END,
    Abstain,
    Contradiction,
    Player,
    box,
    clip,
    need,
    solve,
)

_STEP = {"N": (-1, 0), "E": (0, 1), "S": (1, 0), "W": (0, -1)}
_BACK = {"N": "S", "S": "N", "E": "W", "W": "E"}
_WORDS = {"north": "N", "east": "E", "south": "S", "west": "W"}
_WAY = "(?:north|east|south|west)"
_ROOM = rf"You are at row (\d+), column (\d+)\. Open ways: ({_WAY}(?:, {_WAY})*)\."
"""The parent's room: its open ways a plain list of directions (not "all but north")."""


class MazeWalk(Player):
    """Map the rooms seen and walk the shortest way to the exit through the map where every
    unseen wall is taken to be open (planning on the free-space assumption). It reads one room
    an observation, in the parent's form (:data:`_ROOM`)."""

    def opening(self, text: str) -> str:
        found = need(r"(\d+)x(\d+) maze", text, "maze size")
        self.rows, self.cols = int(found.group(1)), int(found.group(2))
        found = need(r"exit is at row (\d+), column (\d+)", text, "exit")
        self.exit = (int(found.group(1)), int(found.group(2)))
        self.open: dict[tuple[int, int], set[str]] = {}
        self.expect: tuple[int, int] | None = None
        self.came = ""
        return self.reply(text)

    def reply(self, text: str) -> str:
        rooms = set(re.findall(_ROOM, text))
        if len(rooms) != 1:
            raise Abstain(f"no one 'You are at row r, column c. Open ways: ...' in {clip(text)}")
        r, c, ways = rooms.pop()
        pos = (int(r), int(c))
        if self.expect is not None and pos != self.expect:
            raise Contradiction(f"{clip(text)} after a move through an open way to {self.expect}")
        dirs = {_WORDS[w] for w in ways.split(", ")}
        if self.came and _BACK[self.came] not in dirs:
            raise Contradiction(f"{clip(text)}: no way back {_BACK[self.came]}, the way it came")
        if self.open.get(pos, dirs) != dirs:
            raise Contradiction(f"{clip(text)}: room {pos} had the open ways {self.open[pos]}")
        self.open[pos] = dirs
        away = self.distances()
        options = [(away.get(self.moved(pos, d), 10**9), d) for d in "NESW" if d in dirs]
        if not options or min(options)[0] >= 10**9:
            raise Contradiction(
                f"no way to the exit {self.exit} through the {len(self.open)} rooms seen"
            )
        self.came = min(options)[1]
        self.expect = self.moved(pos, self.came)
        return box(self.came)

    @staticmethod
    def moved(room: tuple[int, int], d: str) -> tuple[int, int]:
        return room[0] + _STEP[d][0], room[1] + _STEP[d][1]

    def passable(self, room: tuple[int, int], d: str) -> bool:
        """Whether the way ``d`` out of ``room`` may be open: known rooms say, unseen are open."""
        nxt = self.moved(room, d)
        if not (0 <= nxt[0] < self.rows and 0 <= nxt[1] < self.cols):
            return False
        return d in self.open.get(room, {d}) and _BACK[d] in self.open.get(nxt, {_BACK[d]})

    def distances(self) -> dict[tuple[int, int], int]:
        """Steps from each room to the exit in the optimistic map (breadth first from it)."""
        away, queue = {self.exit: 0}, deque([self.exit])
        while queue:
            room = queue.popleft()
            for d in "NESW":
                nxt = self.moved(room, d)
                if nxt not in away and self.passable(nxt, _BACK[d]):
                    away[nxt] = away[room] + 1
                    queue.append(nxt)
        return away


class Switchboard(Player):
    """Toggle switch i in experiment b when bit b of i is set; a lamp's changes spell its
    switch's number. It reads the panel only as the parent prints it, one line "Switches
    1:up 2:down ..." and one "Lamps A:on ...", naming the same switches and lamps each time."""

    def opening(self, text: str) -> str:
        self.switches, self.lamps = self.panel(text)
        runs = int(need(r"(\d+) experiments", text, "number of experiments").group(1))
        count = len(self.switches)
        self.plan = [
            [i for i in range(1, count + 1) if i >> bit & 1]
            for bit in range(min(runs, count.bit_length()))
        ]
        self.codes = dict.fromkeys(self.lamps, 0)
        self.step = 0
        return self.toggle() if self.plan else self.answer()

    @staticmethod
    def panel(text: str) -> tuple[dict[int, bool], dict[str, bool]]:
        # a line's list ends at a space, punctuation or the line's end: "1:up->down" is no state
        ups = re.findall(r"^Switches((?: \d+:(?:up|down))+)(?![^\s.,;])", text, re.MULTILINE)
        lit = re.findall(r"^Lamps((?: [A-Z]:(?:on|off))+)(?![^\s.,;])", text, re.MULTILINE)
        if len(ups) != 1 or len(lit) != 1:
            raise Abstain(f"no one panel 'Switches 1:up ...' / 'Lamps A:on ...' in {clip(text)}")
        switches = {int(i): s == "up" for i, s in re.findall(r"(\d+):(up|down)", ups[0])}
        lamps = {k: s == "on" for k, s in re.findall(r"([A-Z]):(on|off)", lit[0])}
        return switches, lamps

    def toggle(self) -> str:
        return box("toggle " + " ".join(map(str, self.plan[self.step])))

    def reply(self, text: str) -> str:
        switches, lamps = self.panel(text)
        if set(switches) != set(self.switches) or set(lamps) != set(self.lamps):
            raise Abstain(f"a panel of other switches or lamps than the opening's: {clip(text)}")
        flipped = {i for i in self.switches if switches[i] != self.switches[i]}
        if flipped != set(self.plan[self.step]):
            raise Contradiction(f"toggling {self.plan[self.step]} shows {clip(text)}")
        for lamp, on in lamps.items():
            if on != self.lamps[lamp]:
                self.codes[lamp] |= 1 << self.step
        self.switches, self.lamps, self.step = switches, lamps, self.step + 1
        return self.toggle() if self.step < len(self.plan) else self.answer()

    def answer(self) -> str:
        stray = {k: c for k, c in self.codes.items() if c not in self.switches}
        if stray:
            raise Contradiction(f"lamps {stray} changed in a pattern no switch was toggled in")
        return box(", ".join(f"{k}={c}" for k, c in sorted(self.codes.items())))


def _fits(kind: str, t: dict[int, int], upto: int) -> list[Fraction] | None:
    """Terms 1 to ``upto`` of the rule of ``kind`` through the known terms ``t`` (t[1], t[2],
    ... consecutive), or None when they fit no rule of that kind."""
    n = len(t)
    terms: list[Fraction] = []
    if kind == "arithmetic" and n >= 2:
        terms = [Fraction(t[1] + (k - 1) * (t[2] - t[1])) for k in range(1, upto + 1)]
    elif kind == "quadratic" and n >= 3:
        p = solve([(k, t[k]) for k in (1, 2, 3)], 2)
        terms = [p[0] * k * k + p[1] * k + p[2] for k in range(1, upto + 1)] if p else []
    elif kind == "geometric" and n >= 2 and t[1] != 0:
        terms = [t[1] * Fraction(t[2], t[1]) ** (k - 1) for k in range(1, upto + 1)]
    elif kind in ("fibonacci", "doubling") and n >= 2:
        c = t[2] - 2 * t[1]
        terms = [Fraction(t[1]), Fraction(t[2])]
        while len(terms) < upto:
            a, b = terms[-2:]
            terms.append(a + b if kind == "fibonacci" else 2 * b + c)
    elif kind == "interleaved" and n >= 4:
        odd = _fits("arithmetic", {1: t[1], 2: t[3]}, upto)
        even = _fits("arithmetic", {1: t[2], 2: t[4]}, upto)
        assert odd is not None and even is not None
        terms = [odd[k // 2] if k % 2 == 0 else even[k // 2] for k in range(upto)]
    if len(terms) < upto or any(terms[k - 1] != v for k, v in t.items()):
        return None
    return terms


_FREE = {"quadratic": 3, "interleaved": 4}
"""Free parameters of a rule kind (others: 2). Of the kinds that fit, the one with the fewest
is believed: its fit was tested by the most terms (four terms fit every interleaved rule)."""
_KIND_WORDS = {  # a phrase of the opening's list of rule kinds -> the fit that plays it
    "interleaved": "interleaved",
    "arithmetic": "arithmetic",
    "quadratic": "quadratic",
    "geometric": "geometric",
    "fibonacci": "fibonacci",
    "2*t(n-1)": "doubling",
}


class SequenceOracle(Player):
    """Reveal the first terms, keep the listed rule kinds they fit, predict by the fit with the
    fewest free parameters (:data:`_FREE`). A term is read only as the parent writes it,
    "t(3) = 9", the whole of its clause (not "t(3) = 2*t(2) + 1", "t(9) = 1,024")."""

    def opening(self, text: str) -> str:
        listed = need(r"kinds: (.+?)\.(?:\s|$)", text, "list of rule kinds").group(1)
        self.kinds = []
        for phrase in listed.split(", "):
            kind = next((k for w, k in _KIND_WORDS.items() if w in phrase.lower()), None)
            if kind is None:
                raise Abstain(f"a rule kind this player does not fit: {phrase!r}")
            self.kinds.append(kind)
        found = need(r"n from (\d+) to (\d+) \((\d+) reveals\)", text, "reveals")
        first, last, asks = (int(g) for g in found.groups())
        self.plan = list(range(first, last + 1))[:asks]
        self.targets = [int(k) for k in re.findall(r"t\((\d+)\)", text.split("predict")[1])]
        if first != 1 or not self.plan or not self.targets:
            raise Abstain(f"reveals from t({first}), targets {self.targets}: not this player's")
        self.terms: dict[int, int] = {}
        return box(f"ask {self.plan[0]}")

    def reply(self, text: str) -> str:
        k = self.plan[len(self.terms)]
        found = need(rf"{STANDALONE}t\({k}\) = (-?\d+){VALUE_END}", text, f"'t({k}) = n'")
        self.terms[k] = int(found.group(1))
        if len(self.terms) < len(self.plan):
            return box(f"ask {self.plan[len(self.terms)]}")
        upto = max(self.targets + self.plan)
        kinds = sorted(self.kinds, key=lambda kind: _FREE.get(kind, 2))
        fits = [f for f in (_fits(kind, self.terms, upto) for kind in kinds) if f]
        guesses = [[terms[k - 1] for k in self.targets] for terms in fits]
        whole = [g for g in guesses if all(x.denominator == 1 for x in g)]
        if not whole:
            raise Contradiction(f"the terms {self.terms} fit no listed kind of rule")
        return box("predict " + ", ".join(str(int(x)) for x in whole[0]))


_CLUES: list[tuple[str, Callable[..., Callable[[dict[str, str]], bool]]]] = [
    (r"(\w+) does not own the (\w+)", lambda p, x: lambda s: s[p] != x),
    (r"(\w+) owns either the (\w+) or the (\w+)", lambda p, x, y: lambda s: s[p] in (x, y)),
    (
        r"If (\w+) owns the (\w+), then (\w+) owns the (\w+)",
        lambda p, x, q, y: lambda s: s[p] != x or s[q] == y,
    ),
    (r"Neither (\w+) nor (\w+) owns the (\w+)", lambda p, q, x: lambda s: x not in (s[p], s[q])),
]


class OwnershipRiddle(Player):
    """Keep the assignments every clue allows; ask the question that splits them most evenly;
    answer when one is left (or no question is). An answer is read only as the parent writes
    it, "Yes: Ana owns the cat." or "No: Ana does not own the cat.", of the pair asked."""

    def opening(self, text: str) -> str:
        found = need(
            r"^(.+?) each own exactly one of these pets, all different: (.+?)\. ",
            text,
            "people and pets",
        )
        people, pets = found.group(1).split(", "), found.group(2).split(", ")
        self.left = int(need(r"up to (\d+) yes/no questions", text, "questions").group(1))
        self.people = people
        self.options = [dict(zip(people, p, strict=True)) for p in itertools.permutations(pets)]
        for line in re.findall(r"^- (.+?)\.?$", text, re.MULTILINE):
            test = next(
                (make(*m.groups()) for pat, make in _CLUES if (m := re.fullmatch(pat, line))),
                None,
            )
            if test is None:
                raise Abstain(f"a clue this player does not read: {line!r}")
            self.options = [s for s in self.options if test(s)]
        self.said: list[str] = []
        return self.move("the clues")

    def move(self, after: str) -> str:
        if not self.options:
            raise Contradiction(f"no assignment fits the clues and answers: {after}")
        if len(self.options) == 1 or self.left == 0:
            return box(", ".join(f"{p}={x}" for p, x in self.options[0].items()))
        pairs = {(p, s[p]) for s in self.options for p in self.people}
        self.asked = min(
            sorted(pairs),
            key=lambda q: abs(2 * sum(s[q[0]] == q[1] for s in self.options) - len(self.options)),
        )
        self.left -= 1
        return box(f"ask {self.asked[0]} {self.asked[1]}")

    def reply(self, text: str) -> str:
        p, x = self.asked
        yes, no = f"Yes: {p} owns the {x}.", f"No: {p} does not own the {x}."
        told = {said for said in (yes, no) if re.search(rf"(?<!\w){re.escape(said)}", text)}
        if len(told) != 1:
            raise Abstain(f"no one of {yes!r} / {no!r} in {clip(text)}")
        said = told == {yes}
        self.options = [s for s in self.options if (s[p] == x) == said]
        self.said.append(clip(text, 60))
        return self.move("; ".join(self.said))
