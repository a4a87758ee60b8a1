"""The one mean: of the values present, None when there is none."""

from spade.stats import mean


def test_mean_skips_missing_values_and_has_none_of_nothing():
    assert mean([1.0, None, 0.0, 0.5]) == 0.5
    assert mean(v for v in (0.25, 0.75)) == 0.5  # any iterable, consumed once
    assert mean([]) is None and mean([None, None]) is None
