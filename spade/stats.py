"""Small statistics every layer shows: the mean of the values present, and the intervals that
go with a measured rate or mean.

At the bottom of the package (imports nothing of spade), so the round's summary, the dashboard,
the CLI tables and the benches average and bound the same way."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from statistics import NormalDist, fmean

LEVEL = 0.95
"""The confidence level every interval the project shows is drawn at."""
RESAMPLES = 2000
"""Bootstrap resamples: enough that the interval's ends move by well under a hundredth between
seeds for the sample sizes shown (tens to hundreds of plays)."""


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the values present (None stands for a value there is not, e.g. the hinted win
    rate of an environment without hinted plays); None when no value is present, not a made-up
    0."""
    present = [v for v in values if v is not None]
    return fmean(present) if present else None


def bootstrap_interval(
    values: Sequence[float], *, level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of ``values`` (shape ``(n,)``), seeded so the
    same values give the same interval; None for no values.

    With one value (or all equal) the interval is that value at both ends: the bootstrap cannot
    see variation that was not sampled, so a narrow interval from two or three values is a
    statement about those values, not a guarantee."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    xs = list(values)
    if not xs:
        return None
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(fmean(rng.choices(xs, k=n)) for _ in range(resamples))
    tail = (1 - level) / 2
    lo = means[math.floor(tail * (resamples - 1))]
    hi = means[math.ceil((1 - tail) * (resamples - 1))]
    return (lo, hi)


def wilson_interval(successes: int, n: int, *, level: float = LEVEL) -> tuple[float, float] | None:
    """Wilson score interval of a success rate ``successes / n``; None for no trials.

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 of n: 0 of 3
    wins gives about [0, 0.56], which is all three plays can say."""
    if n <= 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    z = NormalDist().inv_cdf(1 - (1 - level) / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def interval_json(interval: tuple[float, float] | None) -> list[float] | None:
    """An interval as stored in JSON (a two-item list; None for none), so what a stage returns
    equals what it wrote."""
    return None if interval is None else [interval[0], interval[1]]
