"""The learnability check's task family, its scorer and its paired test (bench/learnability.py).

Sums of whole numbers, one turn, a short verifiable answer: "What is 37 + 48 + 15? Reply with
just the number." A difficulty level is (terms, digits). (Asked for ``\\boxed{N}``, the 0.5B
coder wrote a literal "N" or worked the sum in prose: 0 of 16 readable at two terms of one
digit; asked for just the number, 24 of 24 readable.) Items are drawn from
seeded streams kept apart by purpose (calibration, training, validation, held-out), so the
held-out items are never seen in training or used to choose settings.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

LEVELS: tuple[tuple[int, int], ...] = (
    (2, 1),
    (2, 2),
    (3, 2),
    (2, 3),
    (4, 2),
    (3, 3),
    (4, 3),
    (3, 4),
    (5, 3),
    (4, 4),
)
"""Difficulty ladder: (terms, digits per term), easiest first."""
STREAMS = {"calibration": 11, "train": 23, "validation": 37, "heldout": 53}
"""Seed offsets of the item streams (one per purpose, never shared)."""

_BOXED_INT = re.compile(r"\\boxed\{\s*(-?[\d,]+)\s*\}")


@dataclass(frozen=True)
class Item:
    """One question and its answer."""

    key: str  # stream:index, the group id of its samples
    terms: tuple[int, ...]

    @property
    def answer(self) -> int:
        return sum(self.terms)

    @property
    def question(self) -> str:
        expr = " + ".join(str(t) for t in self.terms)
        return f"What is {expr}? Reply with just the number."


def items(stream: str, level: tuple[int, int], n: int, seed: int, start: int = 0) -> list[Item]:
    """Items ``start .. start + n - 1`` of ``stream`` at ``level`` (deterministic per seed)."""
    terms, digits = level
    low, high = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    out = []
    for i in range(start, start + n):
        rng = random.Random(f"{seed}:{STREAMS[stream]}:{terms}x{digits}:{i}")
        out.append(Item(f"{stream}:{i}", tuple(rng.randint(low, high) for _ in range(terms))))
    return out


def score(text: str, item: Item) -> tuple[bool, bool]:
    """(readable, correct): the reply is a whole number (surrounding space, a final period and
    thousands commas allowed), or its last ``\\boxed{}`` holds one; and it is the answer. A
    number inside prose is not read: what is learnt to answer as asked counts as format."""
    found = _BOXED_INT.findall(text)
    value = found[-1] if found else text.strip().removesuffix(".").strip()
    value = value.replace(",", "")
    if not value.lstrip("-").isdigit() or value.count("-") > 1:
        return False, False
    return True, int(value) == item.answer


def calibrated_level(rates: dict[tuple[int, int], float]) -> tuple[int, int]:
    """The level whose base success rate is in [0.3, 0.6] and nearest 0.45; else the nearest
    to 0.45 of all measured (the table says it missed the band)."""
    inside = {lv: r for lv, r in rates.items() if 0.3 <= r <= 0.6}
    pool = inside or rates
    return min(pool, key=lambda lv: (abs(pool[lv] - 0.45), LEVELS.index(lv)))


def mcnemar(before: list[bool], after: list[bool]) -> dict[str, float | int]:
    """Exact two-sided McNemar test on paired outcomes (the same items before and after):
    ``gained`` items wrong before and right after, ``lost`` the reverse; ``p_value`` is the
    two-sided binomial probability of a split at least this uneven of the discordant pairs."""
    if len(before) != len(after):
        raise ValueError(f"{len(before)} outcomes before, {len(after)} after")
    gained = sum(1 for b, a in zip(before, after, strict=True) if not b and a)
    lost = sum(1 for b, a in zip(before, after, strict=True) if b and not a)
    n = gained + lost
    if n == 0:
        return {"gained": 0, "lost": 0, "p_value": 1.0}
    k = min(gained, lost)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return {"gained": gained, "lost": lost, "p_value": min(1.0, 2 * tail)}


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing means over up to ``window`` values."""
    out = []
    for i in range(len(values)):
        part = values[max(0, i + 1 - window) : i + 1]
        out.append(sum(part) / len(part))
    return out
