"""The one mean, and the intervals shown beside measured rates and means."""

import random
from statistics import fmean

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
    # uniform(0, 1) over 400 draws: the standard error is about 0.014, so the 95% interval
    # spans about 0.057; a factor of two either way is far outside what resampling moves
    assert 0.028 < hi2 - lo2 < 0.11


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
