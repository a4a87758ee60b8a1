"""Players of the numeric examples: number hunt, code breaker, polynomial probe, cargo knapsack."""

from __future__ import annotations

import itertools
import math
import operator
import re
from functools import cache

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

MAX_CODES = 200_000
"""Candidate codes a code breaker enumerates at most (10 digits, length 5: 30,240)."""


class NumberHunt(Player):
    """Bisection over the range the opening states, by the parent's clue "My number is higher
    than 500." about the last guess (any other sentence, "Your guess is lower", "Too low", says
    the direction of something else or in other words: it abstains)."""

    def opening(self, text: str) -> str:
        found = need(r"from (-?\d+) to (-?\d+)", text, "range 'from a to b'")
        self.lo, self.hi = int(found.group(1)), int(found.group(2))
        return self.guess()

    def guess(self) -> str:
        self.last = (self.lo + self.hi) // 2
        return box(self.last)

    def reply(self, text: str) -> str:
        told = re.findall(r"\bMy number is (higher|lower) than (-?\d+)(?!\d|[.,]\d)", text)
        said = {way for way, guess in told if int(guess) == self.last}
        if len(said) != 1:
            raise Abstain(f"no one 'My number is higher/lower than {self.last}' in {clip(text)}")
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
    """Guess the first code, in order, that fits every clue so far, read only in the parent's
    form "0123: 1 exact, 2 misplaced" about the last guess (counts said of part of the code or
    in another order are not that clue: it abstains)."""

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
        found = need(
            rf"(?<!\d){self.last}: (\d+) exact, (\d+) misplaced\b",
            text,
            f"'{self.last}: n exact, m misplaced'",
        )
        clue = (int(found.group(1)), int(found.group(2)))
        self.said.append(f"{self.last}: {clue[0]} exact, {clue[1]} misplaced")
        self.codes = fitting(self.codes, self.last, *clue)
        if not self.codes:
            raise Contradiction(f"no code fits every clue: {'; '.join(self.said)}")
        return self.guess()


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
    with fewer evaluations, decode the coefficients from f(X) and f(-X) for the largest X.
    A value is read only as the parent writes it, "f(2) = 13", the whole of its clause (not
    "f(2) = 8*a3 + ...", "f(10) = 9,871")."""

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
        found = need(rf"{STANDALONE}f\({x}\) = (-?\d+){VALUE_END}", text, f"value 'f({x}) = n'")
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
    """Inspect every crate, then load the best set that fits (exact dynamic programme). A crate
    is read only in the parent's form "Crate 3: weight 7 tons, value 12." for the crate asked."""

    def opening(self, text: str) -> str:
        self.capacity = int(need(r"at most (\d+) tons", text, "capacity").group(1))
        self.count = int(need(r"(\d+) crates", text, "number of crates").group(1))
        self.crates: list[tuple[int, int]] = []
        return box("inspect 1")

    def reply(self, text: str) -> str:
        crate = len(self.crates) + 1
        found = need(
            rf"\bCrate {crate}: weight (\d+) tons, value (\d+){VALUE_END}",
            text,
            f"'Crate {crate}: weight w tons, value v'",
        )
        self.crates.append((int(found.group(1)), int(found.group(2))))
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
