"""Regret estimators and the win rate, against hand-computed values."""

import math

import pytest

from spade.curriculum.regret import (
    REGRET_ESTIMATORS,
    get_regret_estimator,
    instance_gaps,
    max_gap,
    mean_gap,
    paired_regret,
    win_rate,
)


def test_mean_gap_is_mean_minus_mean():
    # mean(hinted) = (1 + 1 + 0 + 0) / 4 = 0.5; mean(unhinted) = (1 + 0 + 0 + 0) / 4 = 0.25
    assert mean_gap([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.25)


def test_mean_gap_is_floored_at_zero():
    # 0.0 - 1.0 = -1.0 -> max(0, -1) = 0
    assert mean_gap([0.0, 0.0], [1.0, 1.0]) == 0.0


def test_mean_gap_with_negative_returns():
    # mean(hinted) = (0.5 - 1) / 2 = -0.25; mean(unhinted) = -1 -> -0.25 - (-1) = 0.75
    assert mean_gap([0.5, -1.0], [-1.0, -1.0]) == pytest.approx(0.75)


def test_max_gap_is_best_hinted_minus_mean_unhinted():
    # max(hinted) = 1.0; mean(unhinted) = (0.5 + 0) / 2 = 0.25 -> 0.75
    assert max_gap([0.0, 1.0, 0.0], [0.5, 0.0]) == pytest.approx(0.75)


def test_max_gap_is_floored_at_zero():
    # max(hinted) = 0.2; mean(unhinted) = 0.8 -> -0.6 -> 0
    assert max_gap([0.2, 0.1], [0.8, 0.8]) == 0.0


def test_max_gap_bounds_mean_gap_from_above():
    hinted, unhinted = [0.0, 0.5, 1.0], [0.25, 0.25]
    # mean_gap = 0.5 - 0.25 = 0.25; max_gap = 1.0 - 0.25 = 0.75
    assert mean_gap(hinted, unhinted) == pytest.approx(0.25)
    assert max_gap(hinted, unhinted) == pytest.approx(0.75)


@pytest.mark.parametrize("estimator", [mean_gap, max_gap])
def test_no_hinted_plays_means_no_regret(estimator):
    assert estimator([], [0.0, 1.0]) == 0.0


@pytest.mark.parametrize("estimator", [mean_gap, max_gap])
def test_no_unhinted_plays_means_no_regret(estimator):
    # undefined gap: not read as unhinted mean 0, which would invent regret 1.0 here
    assert estimator([1.0, 1.0], []) == 0.0


@pytest.mark.parametrize("estimator", [mean_gap, max_gap])
def test_all_plays_failed_is_zero_regret(estimator):
    # failed plays return 0.0 by the return rule: 0 - 0 = 0
    assert estimator([0.0] * 16, [0.0] * 8) == 0.0


@pytest.mark.parametrize("estimator", [mean_gap, max_gap])
def test_non_finite_returns_are_rejected(estimator):
    with pytest.raises(ValueError, match="hinted returns must be finite"):
        estimator([math.nan], [0.0])
    with pytest.raises(ValueError, match="unhinted returns must be finite"):
        estimator([0.0], [math.inf])


def test_registry_names():
    assert set(REGRET_ESTIMATORS) == {"mean_gap", "max_gap"}
    assert get_regret_estimator("mean_gap") is mean_gap
    assert get_regret_estimator("max_gap") is max_gap


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(ValueError, match=r"'median_gap'.*valid: max_gap, mean_gap"):
        get_regret_estimator("median_gap")


def test_win_rate():
    # 3 wins of 4
    assert win_rate([True, False, True, True]) == pytest.approx(0.75)
    assert win_rate([False, False]) == 0.0
    assert win_rate([True]) == 1.0


def test_win_rate_of_no_plays_is_zero():
    assert win_rate([]) == 0.0


def test_instance_gaps_pair_plays_on_the_same_instance_and_average_hinted_replicates():
    # seed 1: hinted (1 + 0) / 2 - unhinted 0 = 0.5; seed 2: hinted 1 - unhinted 1 = 0;
    # seed 3 only hinted, seed 4 only unhinted: no pair, left out
    hinted = [(1, 1.0), (2, 1.0), (1, 0.0), (3, 0.5)]
    unhinted = [(2, 1.0), (1, 0.0), (4, 0.0)]
    assert instance_gaps(hinted, unhinted) == [0.0, 0.5]  # the unhinted plays' order
    assert instance_gaps([], unhinted) == [] and instance_gaps(hinted, []) == []
    with pytest.raises(ValueError, match="hinted returns must be finite"):
        instance_gaps([(1, math.nan)], unhinted)


def test_paired_regret_is_the_mean_gap_over_instances_with_a_bootstrap_interval():
    # gaps 0 and 0.5: the mean is 0.25; a resample of two is both 0 (mean 0) a quarter of the
    # time and both 0.5 a quarter of the time, so the 2.5% and 97.5% points are 0 and 0.5
    assert paired_regret([0.0, 0.5]) == (0.25, (0.0, 0.5))
    # no spread: the interval is the value at both ends
    assert paired_regret([0.5, 0.5, 0.5]) == (0.5, (0.5, 0.5))
    assert paired_regret([]) is None


def test_paired_regret_and_its_interval_are_floored_at_zero():
    # gaps -0.5 and 0.25: mean -0.125 -> 0; the interval [-0.5, 0.25] -> [0, 0.25]
    assert paired_regret([-0.5, 0.25]) == (0.0, (0.0, 0.25))
    assert paired_regret([-1.0, -0.5]) == (0.0, (0.0, 0.0))


def test_paired_regret_differs_from_mean_gap_where_instances_differ():
    """Hinted plays on easy instances, unhinted on hard ones: mean_gap reads the instances'
    difference as regret; per instance the hint changes nothing."""
    hinted = [(1, 1.0), (1, 1.0), (2, 0.0)]  # instance 1 easy, 2 hard
    unhinted = [(1, 1.0), (2, 0.0), (2, 0.0)]
    # mean_gap: 2/3 - 1/3 = 1/3; paired: (1 - 1) and (0 - 0) -> 0
    assert mean_gap([r for _, r in hinted], [r for _, r in unhinted]) == pytest.approx(1 / 3)
    assert paired_regret(instance_gaps(hinted, unhinted)) == (0.0, (0.0, 0.0))
