"""The one mean, and the intervals shown beside measured rates and means."""

import math
import random
from statistics import fmean, pstdev

import pytest

from spade.stats import bootstrap_interval, mean, wilson_interval


def test_mean_skips_missing_values_and_has_none_of_nothing():
    assert mean([1.0, None, 0.0, 0.5]) == 0.5
    assert mean(v for v in (0.25, 0.75)) == 0.5  # any iterable, consumed once
    assert mean([]) is None and mean([None, None]) is None


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_data():
    rng = random.Random(1)
    few = [rng.random() for _ in range(10)]
    many = [rng.random() for _ in range(400)]
    lo, hi = bootstrap_interval(few)
    assert lo <= fmean(few) <= hi
    lo2, hi2 = bootstrap_interval(many)
    assert lo2 <= fmean(many) <= hi2
    assert hi2 - lo2 < hi - lo


def test_bootstrap_interval_is_drawn_at_the_95_percent_level():
    """The default interval is the 95% one, told apart from the 90% and 99% ones by its width.

    The mean of 400 uniform draws is close to normal, so a level's interval spans 2 z of the
    bootstrap's standard error se = pstdev / sqrt(400): 3.29 se at 90%, 3.92 se at 95%, 5.15 se
    at 99%. With 2000 resamples a tail quantile moves by about sqrt(p (1 - p) / 2000) / pdf(z)
    = 0.06 se (p = 2.5%), 0.05 se (5%), 0.13 se (0.5%) between seeds: the width by ~0.07 se at
    90% and 95%, ~0.18 se at 99% (measured over 40 seeds: 3.13-3.41, 3.78-4.07, 4.85-5.70).
    The bounds are the midpoints between the levels (3.6 and 4.5), 4 or more of those standard
    deviations from each level's width: any seed passes, a level of 90% or 99% fails."""
    rng = random.Random(1)
    values = [rng.random() for _ in range(400)]
    se = pstdev(values) / math.sqrt(len(values))

    def width(**level: float) -> float:
        lo, hi = bootstrap_interval(values, **level)
        return (hi - lo) / se

    assert 3.6 < width() < 4.5  # the default level: 95%
    assert 3.6 < width(level=0.95) < 4.5
    assert width(level=0.90) < 3.6 and width(level=0.99) > 4.5  # the bounds tell them apart


def test_bootstrap_interval_is_seeded_and_degenerate_without_variation():
    xs = [0.0, 1.0, 0.5, 0.25]
    assert bootstrap_interval(xs, seed=3) == bootstrap_interval(xs, seed=3)
    assert bootstrap_interval([0.4]) == (0.4, 0.4)
    assert bootstrap_interval([0.2, 0.2, 0.2]) == pytest.approx((0.2, 0.2))
    assert bootstrap_interval([]) is None
    with pytest.raises(ValueError, match="level"):
        bootstrap_interval(xs, level=1.0)


def test_wilson_interval_stays_in_the_unit_range_and_is_not_empty_at_zero():
    lo, hi = wilson_interval(0, 3)
    assert lo == 0.0 and 0.5 < hi < 0.6  # 0 of 3 says "below about 56%", not "0"
    lo, hi = wilson_interval(3, 3)
    assert hi == 1.0 and 0.4 < lo < 0.5
    lo, hi = wilson_interval(50, 100)
    assert lo < 0.5 < hi and abs((lo + hi) / 2 - 0.5) < 1e-9
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(4, 3)
