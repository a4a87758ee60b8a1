"""Learning readers for ``leaks_answer``: simple functions from what a player sees to the answer.

Pure code, no jail. On some seeds (the fit seeds) a reader knows what it saw, as values at places
(:func:`spade.verify.places.features`), and the answer, cut into slots
(:func:`spade.verify.places.template`). For each slot :func:`fit` looks for a value, or two, that
one simple function turns into the slot: the value as printed, reversed, in another case, its
anagram among the words seen, read in base 16, 8 or 2, ``x + k``, ``x * k``, ``k - x``,
``x // k``, or the sum, difference, product, quotient, half-sum or half-difference of two
values, or a root of ``t^2 - a t + b`` (two numbers given by their sum and product). A function
is kept when it gives the slot on all fit seeds but one in eight. Only values that change between
seeds are read (a fixed text cannot give an answer that changes), and candidates are found by
looking values up, so the search stays linear in what is seen. A :class:`Reader` fills every
slot so; :mod:`spade.verify.leaks` then plays it on seeds it was not fitted on.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from spade.verify.places import (
    KINDS,
    SCHEMAS,
    TASK,
    Locator,
    Slot,
    Template,
    describe,
    number,
    template,
)

Group = tuple[str | None, ...]  # a place's values on the fit seeds (None: not seen there)
Value = str | Fraction | None
ZERO = Fraction(0)


def _base(value: str, base: int) -> Fraction | None:
    digits = value.lower().removeprefix({16: "0x", 8: "0o", 2: "0b"}[base])
    try:
        return Fraction(int(digits, base)) if digits.isalnum() else None
    except ValueError:
        return None


def _numeric(op: Callable[[Fraction, Fraction], Fraction | None]) -> Callable[..., Value]:
    """``op`` on a value read as a number and the parameter k (None: not a number)."""

    def on(x: str, k: Fraction, _vocabulary: dict[str, str]) -> Value:
        n = number(x)
        return None if n is None else op(n, k)

    return on


def _floordiv(x: Fraction, k: Fraction) -> Fraction | None:
    return Fraction(x.numerator // (x.denominator * int(k))) if x >= 0 else None


def _root(a: Fraction, b: Fraction, larger: Fraction) -> Fraction | None:
    disc = a * a - 4 * b
    if disc < 0 or disc.denominator != 1 or math.isqrt(disc.numerator) ** 2 != disc.numerator:
        return None
    return (a + (1 if larger else -1) * math.isqrt(disc.numerator)) / 2


UNARY: dict[str, Callable[[str, Fraction, dict[str, str]], Value]] = {
    "as printed": lambda x, k, v: x,
    "reversed": lambda x, k, v: x[::-1],
    "in lower case": lambda x, k, v: x.lower(),
    "in upper case": lambda x, k, v: x.upper(),
    "capitalised": lambda x, k, v: x.capitalize(),
    "unscrambled": lambda x, k, v: v.get("".join(sorted(x.lower()))),
    "read in base 16": lambda x, k, v: _base(x, 16),
    "read in base 8": lambda x, k, v: _base(x, 8),
    "read in base 2": lambda x, k, v: _base(x, 2),
    "plus": _numeric(lambda x, k: x + k),
    "times": _numeric(lambda x, k: x * k),
    "subtracted from": _numeric(lambda x, k: k - x),
    "divided by, rounded down,": _numeric(_floordiv),
}
"""name -> (value, parameter k, vocabulary by sorted letters) -> the slot's value."""
BINARY: dict[str, Callable[[Fraction, Fraction, Fraction], Fraction | None]] = {
    "the sum of": lambda a, b, k: a + b,
    "the difference of": lambda a, b, k: a - b,
    "the product of": lambda a, b, k: a * b,
    "the quotient of": lambda a, b, k: a / b if b else None,
    "half the sum of": lambda a, b, k: (a + b) / 2,
    "half the difference of": lambda a, b, k: (a - b) / 2,
    "a root of t^2 - a*t + b, with a and b": _root,
}
"""name -> (a, b, parameter k) -> the slot's value (k of a root: 1 the larger, 0 the smaller)."""
RANK = {name: i for i, name in enumerate([*UNARY, *BINARY])}
_ORDER = {TASK: 0, SCHEMAS: 1}


def apply(
    name: str, k: Fraction, values: Sequence[str | None], vocabulary: dict[str, str]
) -> Value:
    """Function ``name`` with parameter ``k`` on ``values`` (one, or two for a binary one)."""
    if any(v is None for v in values):
        return None
    if name in UNARY:
        return UNARY[name](values[0], k, vocabulary)  # type: ignore[arg-type]
    a, b = number(values[0]), number(values[1])
    return None if a is None or b is None else BINARY[name](a, b, k)


@dataclass(frozen=True)
class Fit:
    """One slot's function: ``name`` applied (with ``k``) to the values at ``args``; each arg
    is the places that agreed on every fit seed, the first one seen is read."""

    slot: int
    name: str
    k: Fraction
    args: tuple[tuple[Locator, ...], ...]

    def places(self) -> set[str]:
        return {locs[0][0] for locs in self.args}

    def within(self, places: set[str]) -> Fit | None:
        """This function reading only ``places`` (None: a value is seen nowhere else)."""
        args = tuple(tuple(loc for loc in locs if loc[0] in places) for locs in self.args)
        return Fit(self.slot, self.name, self.k, args) if all(args) else None

    def read(self, seen: dict[Locator, str]) -> list[str | None]:
        return [next((seen[loc] for loc in locs if loc in seen), None) for locs in self.args]

    def describe(self) -> str:
        a, k = describe(self.args[0][0]), self.k
        if self.name in BINARY:
            which = {1: " (the larger)", 0: " (the smaller)"}[int(k)] if "root" in self.name else ""
            return f"{self.name} {a} and {describe(self.args[1][0])}{which}"
        if self.name == "subtracted from":
            return f"{a} subtracted from {k}"
        if self.name == "plus" and k <= 0:
            return f"{a} minus {-k}" if k else f"{a} as a number"
        if self.name in ("plus", "times", "divided by, rounded down,"):
            return f"{a} {self.name} {k}"
        return a if self.name == "as printed" else f"{a} {self.name}"


@dataclass(frozen=True)
class Reader:
    """Fills every slot of ``form`` by one fit; reads the task text (and the tool schemas),
    and the answer to ``probe`` if it names one. It knows the answers' words it was fitted on
    (``vocabulary``), for anagrams."""

    form: Template
    fits: tuple[Fit, ...]
    probe: str | None
    vocabulary: tuple[str, ...] = field(default=(), compare=False)

    def move(self, seen: dict[Locator, str], words: Sequence[str]) -> str | None:
        """The answer move this reader writes from ``seen`` (None: a value is missing)."""
        vocabulary = _vocabulary([*words, *self.vocabulary])
        values = [
            slot.render(apply(f.name, f.k, f.read(seen), vocabulary))
            for f, slot in zip(self.fits, self.form.slots, strict=True)
        ]
        return None if None in values else self.form.fill(values)  # type: ignore[arg-type]

    def read(self, seen: dict[Locator, str]) -> list[str]:
        """The values this reader reads in ``seen`` (for a verdict's example)."""
        return [v or "?" for f in self.fits for v in f.read(seen)]

    def describe(self) -> str:
        if len(self.fits) == 1:
            return self.fits[0].describe()
        return "; ".join(f"slot {f.slot + 1}: {f.describe()}" for f in self.fits)


def _vocabulary(words: Sequence[str]) -> dict[str, str]:
    """The first word of ``words`` for each set of letters (an anagram's answer)."""
    out: dict[str, str] = {}
    for w in words:
        out.setdefault("".join(sorted(w.lower())), w)
    return out


def needed(seeds: int) -> int:
    """Seeds a function must get right: all but one in eight (7 of 8, 4 of 4)."""
    return seeds - seeds // 8


def fit(
    seen: Sequence[dict[Locator, str]],
    answers: Sequence[str | None],
    words: Sequence[Sequence[str]],
    probes: Sequence[str],
    limit: int = 6,
) -> tuple[list[Reader], str]:
    """Readers fitted on seeds where ``seen[i]`` was seen (``words[i]``: the words of its
    texts) and ``answers[i]`` wins (None: no answer), for the task text alone or with the
    answer to one of ``probes``; the simplest first, at most ``limit``; and a note of the fit."""
    known = [i for i, a in enumerate(answers) if a is not None]
    found = template([a for a in answers if a is not None]) if len(known) > 1 else None
    if found is None:
        return [], "the answer is the same on every seed" if known else "no answers"
    form, values = found
    rows = [seen[i] for i in known]
    need = needed(len(rows))
    groups = _groups(rows, need)
    answer_words = sorted({v for row in values for v in row if v.isalpha()})
    vocab = [_vocabulary([*words[i], *answer_words]) for i in known]
    per_slot = [
        _fits(j, slot, [row[j] for row in values], groups, vocab, need)
        for j, slot in enumerate(form.slots)
    ]
    readers: dict[tuple[Fit, ...], Reader] = {}
    for probe in [None, *probes]:
        allowed = {TASK, SCHEMAS, *([probe] if probe else [])}
        usable = [[u for f in fits if (u := f.within(allowed))] for fits in per_slot]
        if not all(usable):
            continue
        best = tuple(u[0] for u in usable)  # and each slot's second best with the others' best
        choices = [best] + [
            (*best[:j], u[1], *best[j + 1 :]) for j, u in enumerate(usable) if len(u) > 1
        ]
        for fits in choices:
            probed = set().union(*(f.places() for f in fits)) - {TASK, SCHEMAS}
            reader = Reader(form, fits, next(iter(probed), None), tuple(answer_words))
            readers.setdefault(fits, reader)
    ranked = sorted(
        readers.values(), key=lambda r: (r.probe is not None, sum(RANK[f.name] for f in r.fits))
    )
    fitted = sum(bool(fits) for fits in per_slot)
    note = f"{fitted} of {len(form.slots)} answer slots fitted over {len(groups)} changing values"
    return ranked[:limit], note


def _groups(rows: Sequence[dict[Locator, str]], need: int) -> dict[Group, list[Locator]]:
    """Places whose values change between seeds, grouped by their values on every fit seed
    (places that agree everywhere are one value), each group in the order a reader prefers:
    the task text first, a value after a word before one counted from the start or end."""
    counts: dict[Locator, int] = defaultdict(int)
    for row in rows:
        for loc in row:
            counts[loc] += 1
    groups: dict[Group, list[Locator]] = defaultdict(list)
    for loc, count in counts.items():
        if count >= need:
            vector = tuple(row.get(loc) for row in rows)
            if len(set(vector) - {None}) > 1:
                groups[vector].append(loc)

    def preference(loc: Locator) -> tuple[int, str, int, bool, bool, int]:
        place, kind, rule = loc
        after = rule.startswith("after")
        rank = KINDS.index(kind) if kind in KINDS else len(KINDS)  # a digit of a number last
        return _ORDER.get(place, 2), place, rank, not after, "-" in rule, len(rule)

    for locs in groups.values():
        locs.sort(key=preference)
    return groups


Candidate = tuple[str, Fraction, tuple[Group, ...]]


def _candidates(anchor: int, y: str, slot: Slot, groups: Sequence[Group]) -> Iterator[Candidate]:
    """Functions that give ``y`` from the values seen on fit seed ``anchor``; each is then
    checked on every fit seed. Values are looked up, not paired blindly."""
    at = [(g, v) for g in groups if (v := g[anchor]) is not None]
    by_value: dict[str, list[Group]] = defaultdict(list)
    for g, v in at:
        by_value[v].append(g)
    for name, key in (("as printed", y), ("reversed", y[::-1])):
        yield from ((name, ZERO, (g,)) for g in by_value.get(key, []))
    for g, v in at:
        if v != y and v.lower() == y.lower():
            for name in ("in lower case", "in upper case", "capitalised"):
                yield name, ZERO, (g,)
        if v.lower() != y.lower() and sorted(v.lower()) == sorted(y.lower()):
            yield "unscrambled", ZERO, (g,)
    target = number(y) if slot.places is not None else None
    if target is None:
        return
    for g, v in at:
        for base in (16, 8, 2):
            if _base(v, base) == target:
                yield f"read in base {base}", ZERO, (g,)
    nums = [(g, x) for g, v in at if (x := number(v)) is not None]
    by_number: dict[Fraction, list[Group]] = defaultdict(list)
    for g, x in nums:
        by_number[x].append(g)
    for g, x in nums:
        yield "plus", target - x, (g,)
        yield "subtracted from", target + x, (g,)
        if x:
            yield "times", target / x, (g,)
        if x >= 0 and target >= 0 and target.denominator == x.denominator == 1:
            k = x.numerator // (target.numerator + 1) + 1  # the least k with x // k == target
            if k >= 2:
                yield "divided by, rounded down,", Fraction(k), (g,)
        partners = {  # the other value each binary function needs to give the target
            "the sum of": target - x,
            "the difference of": x - target,
            "the product of": target / x if x else None,
            "the quotient of": x / target if target else None,
            "half the sum of": 2 * target - x,
            "half the difference of": x - 2 * target,
            "a root of t^2 - a*t + b, with a and b": target * (x - target),
        }
        for name, b in partners.items():
            larger = Fraction(int(2 * target >= x)) if "root" in name else ZERO
            for h in by_number.get(b, []) if b is not None else []:
                yield name, larger, (g, h)


def _fits(
    index: int,
    slot: Slot,
    ys: Sequence[str],
    groups: dict[Group, list[Locator]],
    vocab: Sequence[dict[str, str]],
    need: int,
) -> list[Fit]:
    """The functions that give slot ``index`` (its values ``ys``) on at least ``need`` fit
    seeds, the simplest first, one per set of values read. Two seeds serve as anchors, so a
    function may miss one seed."""
    tried: set[Candidate] = set()
    found: list[Fit] = []
    for anchor in range(min(2, len(ys) - need + 1)):
        for name, k, args in _candidates(anchor, ys[anchor], slot, list(groups)):
            if (name, k, args) in tried:
                continue
            tried.add((name, k, args))
            right = sum(
                slot.render(apply(name, k, [g[s] for g in args], vocab[s])) == y
                for s, y in enumerate(ys)
            )
            if right >= need:
                found.append(Fit(index, name, k, tuple(tuple(groups[g]) for g in args)))
    found.sort(key=lambda f: (RANK[f.name], max(_ORDER.get(p, 2) for p in f.places())))
    kept: dict[frozenset[tuple[Locator, ...]], Fit] = {}
    for f in found:  # of the functions of the same values, the simplest (x, not x * 1)
        kept.setdefault(frozenset(f.args), f)
    return list(kept.values())
