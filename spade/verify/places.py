"""What a reader sees, by place, and the form of the answer it must write (for
:mod:`spade.verify.readers`; pure code, no jail).

A text a player is shown is cut into *values at places* (:func:`features`): the i-th number,
word, quoted string, boxed token, number written in words, run of listed digits or of spelled
letters, counted from the start or from the end of the text, or the first one after a given word;
and each digit of a number so found. A place is a rule a reader can follow on any seed. The
answer (a solution's last move) is cut into a fixed form with *slots*, its parts that change
between seeds (:func:`template`).
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

from spade.verify.episodes import WORD

TASK = "the task text"
SCHEMAS = "the tool schemas"
MAX_TEXT = 20_000
"""Characters of a text a reader reads from its start (and 4,000 more from its end)."""
MAX_PLACE = 300
"""Values of a kind counted from either end of a text (#1..#300, #-1..#-300)."""
MAX_DIGITS = 12
"""Longest number whose digits are read one by one too."""

Locator = tuple[str, str, str]  # (place, kind, rule): ("the task text", "number", "#2")

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_DECIMAL = re.compile(r"-?\d+(?:\.\d+)?$")
_TOKEN = re.compile(r"-?\d+(?:\.\d+)?|[A-Za-z_][A-Za-z0-9_]*")
_QUOTED = re.compile(r"\"([^\"\n]{1,40})\"|'([^'\n]{1,40})'|`([^`\n]{1,40})`")
_BOXED = re.compile(r"\\boxed\{([^{}\n]{1,80})\}")
_LETTERS = re.compile(r"(?<![A-Za-z])[A-Za-z](?:[\s,;/|.-]+[A-Za-z](?![A-Za-z])){2,}")
_SEP = re.compile(r"[\s,;/|-]*")
_UNITS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
]  # fmt: skip
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_WORDS = {w: i for i, w in enumerate(_UNITS)} | {w: 20 + 10 * i for i, w in enumerate(_TENS)}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6}
_NW = r"\b(?:" + "|".join([*_WORDS, *_SCALES]) + r")\b"
_NUMBER_WORDS = re.compile(rf"{_NW}(?:(?:[\s-]+|\s+and\s+){_NW})*", re.IGNORECASE)
KINDS = (
    "number", "word", "quoted string", "boxed token", "number in words", "run of digits",
    "run of letters",
)  # fmt: skip


def numbers(text: str) -> list[tuple[str, int]]:
    """Numbers as written, with where they start; a dash after a letter or digit is no sign
    (``TX-100002`` holds 100002)."""
    out = []
    for m in _NUMBER.finditer(text):
        value, start = m.group(), m.start()
        if value[0] == "-" and start and text[start - 1].isalnum():
            value, start = value[1:], start + 1
        out.append((value, start))
    return out


def in_words(run: str) -> str:
    """A run of number words as digits: "four hundred and seventeen" is 417, "four one seven"
    (digits named one by one) is "417"."""
    words = [w.lower() for w in re.findall(_NW, run, re.IGNORECASE)]
    if len(words) > 1 and all(_WORDS.get(w, 10) < 10 for w in words):
        return "".join(str(_WORDS[w]) for w in words)
    total = current = 0
    for w in words:
        if w in _WORDS:
            current += _WORDS[w]
        elif w == "hundred":
            current = max(current, 1) * 100
        else:
            total, current = total + max(current, 1) * _SCALES[w], 0
    return str(total + current)


def _digit_runs(found: list[tuple[str, int]], text: str) -> Iterator[tuple[str, int]]:
    """Runs of two or more single digits with only separators between (``4, 1, 7``)."""
    run: list[tuple[str, int]] = []
    for value, pos in [*found, ("", len(text) + 1)]:
        joined = run and value.isdigit() and len(value) == 1
        if joined and _SEP.fullmatch(text[run[-1][1] + 1 : pos]):
            run.append((value, pos))
            continue
        if len(run) > 1:
            yield "".join(v for v, _ in run), run[0][1]
        run = [(value, pos)] if value.isdigit() and len(value) == 1 else []


def features(place: str, text: str) -> dict[Locator, str]:
    """The values a reader can find in ``text`` by a fixed rule, by where they are."""
    if len(text) > MAX_TEXT + 4000:
        text = text[:MAX_TEXT] + "\n" + text[-4000:]
    words = list(WORD.finditer(text))
    ends = [w.end() for w in words]
    found = numbers(text)
    kinds: dict[str, list[tuple[str, int]]] = {
        "number": found,
        "word": [(w.group(), w.start()) for w in words],
        "quoted string": [
            (next(g for g in m.groups() if g is not None).strip(), m.start())
            for m in _QUOTED.finditer(text)
        ],
        "boxed token": [(m.group(1).strip(), m.start()) for m in _BOXED.finditer(text)],
        "number in words": [(in_words(m.group()), m.start()) for m in _NUMBER_WORDS.finditer(text)],
        "run of digits": list(_digit_runs(found, text)),
        "run of letters": [
            (re.sub(r"[^A-Za-z]", "", m.group()), m.start()) for m in _LETTERS.finditer(text)
        ],
    }
    out: dict[Locator, str] = {}
    for kind, items in kinds.items():
        items = [(v, p) for v, p in items if v]
        n = len(items)
        for i, (value, pos) in enumerate(items):
            if i < MAX_PLACE:
                out[(place, kind, f"#{i + 1}")] = value
            if n - i <= MAX_PLACE:
                out[(place, kind, f"#{i - n}")] = value
            k = bisect.bisect_right(ends, pos) - 1
            after = f"after {words[k].group().lower()!r}" if k >= 0 else "first"
            out.setdefault((place, kind, after), value)
    # each digit of a number is a value too (a serial whose digits are the wiring)
    for (where, kind, rule), value in list(out.items()):
        if kind == "number" and value.isdigit() and 1 < len(value) <= MAX_DIGITS:
            for j, digit in enumerate(value):
                out[(where, f"digit {j + 1} of the number", rule)] = digit
    return out


def describe(loc: Locator) -> str:
    """A place in words: "the number after 'is' of the task text"."""
    place, kind, rule = loc
    return f"the {kind} {rule} of {place}"


@dataclass(frozen=True)
class Slot:
    """A changing part of the answer: its values are numbers with ``places`` decimals (None:
    text, or numbers written with leading zeros, matched as text only)."""

    places: int | None

    def render(self, value: Fraction | str | None) -> str | None:
        """``value`` written as the slot's values are (None: it cannot be)."""
        if value is None or isinstance(value, str):
            return value
        if self.places is None:
            return None
        scaled = value * 10**self.places
        if scaled.denominator != 1:
            return None
        if not self.places:
            return str(scaled.numerator)
        sign = "-" if scaled < 0 else ""
        digits = str(abs(scaled.numerator)).zfill(self.places + 1)
        return f"{sign}{digits[: -self.places]}.{digits[-self.places :]}"


def _slot(values: Sequence[str]) -> Slot:
    if not all(_DECIMAL.match(v) for v in values):
        return Slot(None)
    places = {len(v.partition(".")[2]) for v in values}
    # numbers with leading zeros (a code "0527") are text: arithmetic would drop the zeros
    canonical = all(v == Slot(min(places)).render(Fraction(v)) for v in values)
    return Slot(places.pop() if len(places) == 1 and canonical else None)


@dataclass(frozen=True)
class Template:
    """The answer's fixed form: literal text around ``slots`` (parts: a str is literal, an int
    is a slot's index)."""

    parts: tuple[str | int, ...]
    slots: tuple[Slot, ...]

    def fill(self, values: Sequence[str]) -> str:
        return "".join(p if isinstance(p, str) else values[p] for p in self.parts)


def tokens(move: str) -> list[tuple[str, int, int]]:
    """The numbers and names of a move, with where each starts and ends (as :func:`numbers`,
    a dash after a letter or digit is no sign)."""
    out = []
    for m in _TOKEN.finditer(move):
        start = m.start() + (
            m.group()[0] == "-" and m.start() > 0 and move[m.start() - 1].isalnum()
        )
        out.append((move[start : m.end()], start, m.end()))
    return out


def template(answers: Sequence[str]) -> tuple[Template, list[list[str]]] | None:
    """The form shared by ``answers`` and each answer's slot values: the tokens that change
    between answers written alike (same tokens, same text between); otherwise the text between
    their common start and end as one slot. None: no answer changes."""
    cut = [tokens(a) for a in answers]
    gaps = [
        tuple(a[e:s] for (_, _, e), (_, s, _) in itertools.pairwise(t))
        for a, t in zip(answers, cut, strict=True)
    ]
    if len(set(gaps)) == 1 and len({len(t) for t in cut}) == 1 and cut[0]:
        columns = list(zip(*[[v for v, _, _ in t] for t in cut], strict=True))
        heads = {a[: t[0][1]] for a, t in zip(answers, cut, strict=True)}
        tails = {a[t[-1][2] :] for a, t in zip(answers, cut, strict=True)}
        if len(heads) == 1 and len(tails) == 1:
            parts: list[str | int] = [heads.pop()]
            slots: list[Slot] = []
            for i, column in enumerate(columns):
                if len(set(column)) == 1:
                    parts.append(column[0])
                else:
                    parts.append(len(slots))
                    slots.append(_slot(column))
                parts.append(gaps[0][i] if i < len(gaps[0]) else tails.pop())
            changing = [i for i, c in enumerate(columns) if len(set(c)) > 1]
            values = [[t[i][0] for i in changing] for t in cut]
            return (Template(tuple(parts), tuple(slots)), values) if slots else None
    if len(set(answers)) == 1:
        return None
    head = len(_common([*answers]))
    tail = len(_common([a[head:][::-1] for a in answers]))
    middles = [a[head : len(a) - tail] for a in answers]
    ends = (answers[0][:head], 0, answers[0][len(answers[0]) - tail :])
    return Template(ends, (Slot(None),)), [[m] for m in middles]


def _common(texts: list[str]) -> str:
    out = texts[0]
    for t in texts[1:]:
        while not t.startswith(out):
            out = out[:-1]
    return out


def number(value: str | None) -> Fraction | None:
    """``value`` as an exact number, if it is one as written (``-12``, ``3.50``)."""
    return Fraction(value) if value is not None and _DECIMAL.match(value) else None
