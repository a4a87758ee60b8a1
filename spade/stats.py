"""Small statistics every layer shows: the mean of the values present.

At the bottom of the package (imports nothing of spade), so the round's summary, the dashboard
and the CLI tables average the same way."""

from __future__ import annotations

from collections.abc import Iterable
from statistics import fmean


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the values present (None stands for a value there is not, e.g. the hinted win
    rate of an environment without hinted plays); None when no value is present, not a made-up
    0."""
    present = [v for v in values if v is not None]
    return fmean(present) if present else None
