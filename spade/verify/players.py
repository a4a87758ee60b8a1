"""Observation-only reference players for the bundled examples (``spade/envs/examples``).

``feasibility`` replays ``solution()``, which reads the hidden state, so a clue that lies or is
noise still passes it. A player here is our own code that wins a bundled example the way an agent
must: by reading what it is told (regexes over the text, the JSON of tool results), never the
hidden state. Each is a :data:`~spade.verify.episodes.Policy` made fresh per episode; it reads
sizes and ranges from the opening, since a design may retune them.

A player raises :class:`Abstain` when an observation is not in the form it reads (the design
reworded its feedback: the player then says nothing of the design), and :class:`Contradiction`
when what it was told leaves no way to win (a clue inconsistent with the earlier ones or with
the rules the opening stated): the game is then not won by playing.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import re
from collections import deque
from collections.abc import Callable
from fractions import Fraction
from functools import cache
from typing import Any

MAX_CODES = 200_000
"""Candidate codes a code breaker enumerates at most (10 digits, length 5: 30,240)."""


class Abstain(Exception):
    """The observation is not in the form the player reads: it cannot judge the design."""


class Contradiction(Exception):
    """What the player was told leaves no way to win (clues inconsistent with one another or
    with the opening's rules)."""


def clip(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def need(pattern: str, text: str, what: str, flags: int = 0) -> re.Match[str]:
    """The first match of ``pattern`` in ``text``, or :class:`Abstain` naming ``what``."""
    found = re.search(pattern, text, flags)
    if found is None:
        raise Abstain(f"no {what} in {clip(text)}")
    return found


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


class NumberHunt(Player):
    """Bisection over the range the opening states, by the higher/lower clues."""

    def opening(self, text: str) -> str:
        found = need(r"from (-?\d+) to (-?\d+)", text, "range 'from a to b'")
        self.lo, self.hi = int(found.group(1)), int(found.group(2))
        return self.guess()

    def guess(self) -> str:
        self.last = (self.lo + self.hi) // 2
        return box(self.last)

    def reply(self, text: str) -> str:
        said = set(re.findall(r"\b(higher|lower)\b", text.lower()))
        if len(said) != 1:
            raise Abstain(f"no one of 'higher'/'lower' in {clip(text)}")
        lo, hi = self.lo, self.hi
        if said == {"higher"}:
            self.lo = max(self.lo, self.last + 1)
        else:
            self.hi = min(self.hi, self.last - 1)
        if self.lo > self.hi:
            raise Contradiction(
                f"{clip(text)} after the earlier clues left {lo} to {hi}: no number fits them all"
            )
        return self.guess()


@cache
def all_codes(digits: str, length: int) -> list[str]:
    """Every code of ``length`` distinct ``digits``, in order (made once; never changed)."""
    return ["".join(p) for p in itertools.permutations(digits, length)]


def fitting(codes: list[str], guess: str, exact: int, misplaced: int) -> list[str]:
    """The codes that would answer ``guess`` with ``exact`` and ``misplaced`` (written for
    speed: 30,240 five-digit codes are filtered in ~30 ms)."""
    digits, eq = set(guess), operator.eq
    return [
        c
        for c in codes
        if (e := sum(map(eq, guess, c))) == exact and len(digits.intersection(c)) - e == misplaced
    ]


class CodeBreaker(Player):
    """Guess the first code, in order, that fits every exact/misplaced clue so far."""

    def opening(self, text: str) -> str:
        length = int(need(r"(\d+) distinct digits", text, "code length").group(1))
        span = re.search(r"\((\d)-(\d)\)", text)
        digits = "0123456789"[int(span.group(1)) : int(span.group(2)) + 1] if span else "0123456789"
        if not 0 < length <= len(digits) or math.perm(len(digits), length) > MAX_CODES:
            raise Abstain(f"{length} distinct digits of {digits!r}: not a code this player plays")
        self.codes = all_codes(digits, length)
        self.said: list[str] = []
        return self.guess()

    def guess(self) -> str:
        self.last = self.codes[0]
        return box(self.last)

    def reply(self, text: str) -> str:
        found = need(r"(\d+) exact, (\d+) misplaced", text, "'n exact, m misplaced'")
        clue = (int(found.group(1)), int(found.group(2)))
        self.said.append(f"{self.last}: {clue[0]} exact, {clue[1]} misplaced")
        self.codes = fitting(self.codes, self.last, *clue)
        if not self.codes:
            raise Contradiction(f"no code fits every clue: {'; '.join(self.said)}")
        return self.guess()


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


def digits_of(value: int, base: int, lo: int, count: int) -> list[int] | None:
    """``value`` as ``count`` digits (lowest first) from ``lo`` to ``lo + base - 1`` in
    ``base``: unique when the digit range is narrower than the base; None if it does not fit."""
    out = []
    for _ in range(count):
        digit = (value - lo) % base + lo
        out.append(digit)
        value = (value - digit) // base
    return out if value == 0 else None


class PolynomialProbe(Player):
    """Evaluate at degree + 1 small points and interpolate (one more point checks the clue);
    with fewer evaluations, decode the coefficients from f(X) and f(-X) for the largest X."""

    def opening(self, text: str) -> str:
        self.degree = max(int(d) for d in re.findall(r"x\^(\d+)", text) or ["1"])
        found = need(r"between (-?\d+) and (-?\d+)", text, "coefficient range")
        self.lo, self.hi = int(found.group(1)), int(found.group(2))
        found = need(r"from (-?\d+) to (-?\d+)", text, "range of x")
        xlo, xhi = int(found.group(1)), int(found.group(2))
        queries = int(need(r"(\d+) evaluations", text, "number of evaluations").group(1))
        self.leading = bool(re.search(r"a\d+ is not zero", text))
        near = sorted(range(xlo, xhi + 1), key=lambda x: (abs(x), -x))
        wide = min(-xlo, xhi)
        n = self.degree + 1
        if queries >= n:
            self.plan = near[: min(queries, n + 1)]
        elif queries >= 2 and wide > 0 and self.hi - self.lo < wide * wide:
            self.plan = [wide, -wide, *[x for x in near if abs(x) != wide][: min(1, queries - 2)]]
        else:
            self.plan = near[:queries]  # too few values to pin it: the best the player can do
        self.seen: list[tuple[int, int]] = []
        return box(f"f({self.plan[0]})")

    def reply(self, text: str) -> str:
        x = self.plan[len(self.seen)]
        found = need(rf"f\(\s*{x}\s*\)\s*=\s*(-?\d+)", text, f"value 'f({x}) = ...'")
        self.seen.append((x, int(found.group(1))))
        if len(self.seen) < len(self.plan):
            return box(f"f({self.plan[len(self.seen)]})")
        coeffs = self.fit()
        return box("answer " + ", ".join(map(str, coeffs)))

    def fit(self) -> list[int]:
        d, points = self.degree, self.seen
        if len(points) > d:
            found = solve(points, d)
            coeffs = (
                [int(c) for c in found]
                if found and all(c.denominator == 1 for c in found)
                else None
            )
        else:
            coeffs = self.decoded()
        told = ", ".join(f"f({x}) = {y}" for x, y in points)
        rules = f"degree {d}, integer coefficients from {self.lo} to {self.hi}"
        if coeffs is None or not all(self.lo <= c <= self.hi for c in coeffs):
            raise Contradiction(f"{told} fit no polynomial of {rules}")
        if self.leading and coeffs[0] == 0:
            raise Contradiction(f"{told} fit only a polynomial whose leading coefficient is 0")
        for x, y in points:
            if sum(c * x ** (d - k) for k, c in enumerate(coeffs)) != y:
                raise Contradiction(f"{told} fit no one polynomial of {rules}")
        return coeffs

    def decoded(self) -> list[int] | None:
        values = dict(self.seen)
        wide = max(values)
        if -wide not in values:
            return None
        even2, odd2 = values[wide] + values[-wide], values[wide] - values[-wide]
        if even2 % 2 or odd2 % (2 * wide):
            return None
        base, count = wide * wide, self.degree // 2 + 1
        evens = digits_of(even2 // 2, base, self.lo, count)
        odds = digits_of(odd2 // (2 * wide), base, self.lo, (self.degree + 1) // 2)
        if evens is None or odds is None:
            return None
        low_first = [evens[k // 2] if k % 2 == 0 else odds[k // 2] for k in range(self.degree + 1)]
        return low_first[::-1]


class CargoKnapsack(Player):
    """Inspect every crate, then load the best set that fits (exact dynamic programme)."""

    def opening(self, text: str) -> str:
        self.capacity = int(need(r"at most (\d+) tons", text, "capacity").group(1))
        self.count = int(need(r"(\d+) crates", text, "number of crates").group(1))
        self.crates: list[tuple[int, int]] = []
        return box("inspect 1")

    def reply(self, text: str) -> str:
        weight = need(r"weight\D{0,12}?(\d+)", text, "weight", re.IGNORECASE)
        value = need(r"value\D{0,12}?(\d+)", text, "value", re.IGNORECASE)
        self.crates.append((int(weight.group(1)), int(value.group(1))))
        if len(self.crates) < self.count:
            return box(f"inspect {len(self.crates) + 1}")
        best: dict[int, tuple[int, tuple[int, ...]]] = {0: (0, ())}  # weight -> best value, set
        for i, (w, v) in enumerate(self.crates, start=1):
            for have, (worth, picked) in list(best.items()):
                if have + w <= self.capacity and best.get(have + w, (-1, ()))[0] < worth + v:
                    best[have + w] = (worth + v, (*picked, i))
        picked = max(best.values())[1]
        if not picked:
            raise Contradiction(f"no crate fits the capacity {self.capacity}: {self.crates}")
        return box("load " + ", ".join(map(str, picked)))


_STEP = {"N": (-1, 0), "E": (0, 1), "S": (1, 0), "W": (0, -1)}
_BACK = {"N": "S", "S": "N", "E": "W", "W": "E"}
_WORDS = {"north": "N", "east": "E", "south": "S", "west": "W"}


class MazeWalk(Player):
    """Map the rooms seen and walk the shortest way to the exit through the map where every
    unseen wall is taken to be open (planning on the free-space assumption)."""

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
        rooms = re.findall(r"You are at row (\d+), column (\d+)\. Open ways: ([a-z, ]*)", text)
        if not rooms:
            raise Abstain(f"no 'You are at row r, column c. Open ways: ...' in {clip(text)}")
        r, c, ways = rooms[-1]
        pos = (int(r), int(c))
        if self.expect is not None and pos != self.expect:
            raise Contradiction(f"{clip(text)} after a move through an open way to {self.expect}")
        dirs = {_WORDS[w] for w in re.findall(r"[a-z]+", ways) if w in _WORDS}
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
    switch's number."""

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
        switches = {int(i): s == "up" for i, s in re.findall(r"\b(\d+):(up|down)\b", text)}
        lamps = {k: s == "on" for k, s in re.findall(r"\b([A-Z]):(on|off)\b", text)}
        if not switches or not lamps:
            raise Abstain(f"no panel 'Switches 1:up ...' / 'Lamps A:on ...' in {clip(text)}")
        return switches, lamps

    def toggle(self) -> str:
        return box("toggle " + " ".join(map(str, self.plan[self.step])))

    def reply(self, text: str) -> str:
        switches, lamps = self.panel(text)
        flipped = {i for i in self.switches if switches.get(i) != self.switches[i]}
        if flipped != set(self.plan[self.step]) or set(lamps) != set(self.lamps):
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
    fewest free parameters (:data:`_FREE`)."""

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
        self.terms[k] = int(need(rf"t\({k}\) = (-?\d+)", text, f"'t({k}) = ...'").group(1))
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
    answer when one is left (or no question is)."""

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
        said = need(r"^\s*(Yes|No)\b", text, "'Yes'/'No' answer").group(1) == "Yes"
        p, x = self.asked
        self.options = [s for s in self.options if (s[p] == x) == said]
        self.said.append(clip(text, 60))
        return self.move("; ".join(self.said))


def tool_result(text: str) -> Any:
    """The JSON of the one tool response in ``text``; :class:`Abstain` on anything else (an
    error reply included: the caller decides whether it contradicts what it was told)."""
    found = need(r"<tool_response>\s*(.*?)\s*</tool_response>", text, "tool response", re.DOTALL)
    try:
        return json.loads(found.group(1))
    except json.JSONDecodeError:
        raise Abstain(f"a tool response that is not JSON: {clip(found.group(1))}") from None


def cents(amount: object) -> int:
    return round(float(str(amount)) * 100)


def money(amount: int) -> str:
    return f"{amount // 100}.{amount % 100:02d}"


class BankTransfer(Player):
    """Read the invoice, the accounts and the payee; move the shortfall from savings to
    checking; pay from checking with the invoice as reference; answer the confirmation."""

    def opening(self, text: str) -> str:
        found = need(
            r"^(.+?) asks you to pay invoice (\S+?)\.? in full", text, "customer and invoice"
        )
        self.customer, self.invoice = found.group(1), found.group(2)
        self.stage = 0
        return call("get_invoice", invoice_id=self.invoice)

    def reply(self, text: str) -> str:
        self.stage += 1
        if self.stage == 1:
            self.bill = tool_result(text)
            return call("list_accounts", customer=self.customer)
        if self.stage == 2:
            kinds = {a.get("type"): a for a in tool_result(text) if isinstance(a, dict)}
            if not {"checking", "savings"} <= set(kinds):
                raise Abstain(f"no checking and savings account in {clip(text)}")
            self.checking, self.savings = kinds["checking"], kinds["savings"]
            return call("lookup_payee", name=self.bill["payee"])
        if self.stage == 3:
            self.payee = tool_result(text)["account_id"]
            short = cents(self.bill["amount_due"]) - cents(self.checking["balance"])
            if short > 0:
                if cents(self.savings["balance"]) < short:
                    raise Contradiction(f"savings {self.savings} cannot cover {money(short)}")
                return call(
                    "transfer",
                    from_account=self.savings["account_id"],
                    to_account=self.checking["account_id"],
                    amount=short / 100,
                )
            self.stage += 1
        if self.stage == 4:
            if "Error" in text:
                raise Contradiction(f"moving the shortfall failed: {clip(text)}")
            return call(
                "transfer",
                from_account=self.checking["account_id"],
                to_account=self.payee,
                amount=cents(self.bill["amount_due"]) / 100,
                reference=self.invoice,
            )
        if "Error" in text:
            raise Contradiction(f"paying {self.bill} from {self.checking} failed: {clip(text)}")
        return f"<answer>{tool_result(text)['confirmation']}</answer>"


class OrderFulfillment(Player):
    """Read the order and its products; restock those short of the ordered quantity; ship;
    answer the total of quantity times unit price."""

    def opening(self, text: str) -> str:
        self.order = need(r"Order (\S+) must ship", text, "order id").group(1)
        self.refill = int(need(r"stock to exactly (\d+) units", text, "restock level").group(1))
        self.queue: list[str] = []
        self.items: dict[str, int] = {}
        self.total = 0
        return call("get_order", order_id=self.order)

    def reply(self, text: str) -> str:
        result = tool_result(text) if "<tool_response>" in text and "Error" not in text else None
        if not self.items:
            if not isinstance(result, dict) or not result.get("items"):
                raise Abstain(f"no order items in {clip(text)}")
            self.items = {i["sku"]: int(i["quantity"]) for i in result["items"]}
            self.queue = [call("get_product", sku=sku) for sku in self.items]
            self.looked = 0
        elif self.looked < len(self.items):
            if not isinstance(result, dict) or result.get("sku") not in self.items:
                raise Abstain(f"no product in {clip(text)}")
            self.looked += 1
            self.total += self.items[result["sku"]] * cents(result["price"])
            if int(result["stock"]) < self.items[result["sku"]]:
                self.queue.append(call("update_stock", sku=result["sku"], quantity=self.refill))
            if self.looked == len(self.items):
                self.queue.append(call("ship_order", order_id=self.order))
        elif result is None:
            raise Contradiction(f"after the restock the tools said {clip(text)}")
        return self.queue.pop(0) if self.queue else f"<answer>{money(self.total)}</answer>"


PLAYERS: dict[str, type[Player]] = {
    "number_hunt": NumberHunt,
    "code_breaker": CodeBreaker,
    "polynomial_probe": PolynomialProbe,
    "cargo_knapsack": CargoKnapsack,
    "maze_walk": MazeWalk,
    "switchboard": Switchboard,
    "sequence_oracle": SequenceOracle,
    "ownership_riddle": OwnershipRiddle,
    "bank_transfer": BankTransfer,
    "order_fulfillment": OrderFulfillment,
}
"""The player of each bundled example, by the example's file stem."""
