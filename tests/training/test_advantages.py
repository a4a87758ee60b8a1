"""Group-relative advantages against hand-computed values."""

import math

import pytest
import torch
from torch.testing import assert_close

from spade.training.advantages import (
    ADVANTAGES,
    batch_centred,
    centred,
    designer_estimator,
    get_advantage_fn,
    group_advantages,
    zscore,
)

F64 = torch.float64


def r(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def ids(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


# ----------------------------------------------------------------------------------- z-score


def test_all_equal_rewards_give_exactly_zero():
    # 0.1 + 0.1 + 0.1 = 0.30000000000000004, / 3 = 0.10000000000000002 != 0.1: a naive
    # r - mean would be -1.4e-17, and divided by (std + eps) ~ 1e-6 a spurious -1.4e-11
    out = group_advantages(r(0.1, 0.1, 0.1), ids(0, 0, 0))
    assert torch.equal(out, torch.zeros(3, dtype=F64))
    out = group_advantages(r(1.0, 1.0, 1.0, 1.0), ids(5, 5, 5, 5))
    assert torch.equal(out, torch.zeros(4, dtype=F64))


def test_group_of_one_gives_zero():
    assert torch.equal(group_advantages(r(0.7), ids(3)), r(0.0))
    assert torch.equal(centred(r(0.7), ids(3)), r(0.0))


def test_known_four_reward_group():
    # rewards 1, 2, 3, 4: mean 2.5, centred -1.5, -0.5, 0.5, 1.5
    # squares 2.25 + 0.25 + 0.25 + 2.25 = 5; SAMPLE variance 5 / (4 - 1) = 5/3
    # std = sqrt(5/3) = 1.2909944...; 1.5 / std = 1.5 * sqrt(3/5) = 1.1618950..., 0.5 / std = 0.3872983...
    out = group_advantages(r(1, 2, 3, 4), ids(0, 0, 0, 0), eps=0.0)
    assert_close(
        out, r(-1.1618950038622251, -0.3872983346207417, 0.3872983346207417, 1.1618950038622251)
    )
    # default eps = 1e-6 is added to the std
    std = math.sqrt(5 / 3)
    out = group_advantages(r(1, 2, 3, 4), ids(0, 0, 0, 0))
    assert_close(out, r(-1.5, -0.5, 0.5, 1.5) / (std + 1e-6), rtol=0, atol=1e-15)


def test_sample_not_population_std():
    # rewards 0, 0, 1, 1: mean 0.5, centred -0.5, -0.5, 0.5, 0.5; squares sum to 1
    # sample var 1/3, std 0.5773503 -> z = 0.5 / 0.5773503 = sqrt(3)/2 = 0.8660254
    # (the population std 0.5 would give exactly 1)
    out = zscore(r(0, 0, 1, 1), ids(1, 1, 1, 1))
    half_sqrt3 = math.sqrt(3) / 2
    assert_close(out, r(-half_sqrt3, -half_sqrt3, half_sqrt3, half_sqrt3), rtol=0, atol=1e-5)
    exact = group_advantages(r(0, 0, 1, 1), ids(1, 1, 1, 1), eps=0.0)
    assert_close(exact, r(-half_sqrt3, -half_sqrt3, half_sqrt3, half_sqrt3))


def test_several_groups_at_once_interleaved_and_non_contiguous_ids():
    # group 7 at positions 0, 2, 4, 7: rewards 1, 2, 3, 4 -> +-1.1618950, +-0.3872983 (above)
    # group 3 at positions 1, 3, 6: rewards 0, 3, 0: mean 1, centred -1, 2, -1; squares 6;
    #   sample var 6 / 2 = 3; std sqrt(3) -> -1/sqrt3, 2/sqrt3, -1/sqrt3 = -0.5773503, 1.1547005
    # group 9 at position 5: alone -> 0
    # group -2 at positions 8, 9, 10: 0.1 three times -> exactly 0
    rewards = r(1, 0, 2, 3, 3, 0.9, 0, 4, 0.1, 0.1, 0.1)
    groups = ids(7, 3, 7, 3, 7, 9, 3, 7, -2, -2, -2)
    out = group_advantages(rewards, groups, eps=0.0)
    a, b = 1.1618950038622251, 0.3872983346207417
    s = 1 / math.sqrt(3)
    expected = r(-a, -s, -b, 2 * s, b, 0.0, -s, a, 0.0, 0.0, 0.0)
    assert_close(out, expected)
    assert out[5] == 0 and torch.equal(out[8:], torch.zeros(3, dtype=F64))
    # each group is independent: the same as computing the groups one by one
    for g in (7, 3, 9, -2):
        sel = groups == g
        assert_close(out[sel], group_advantages(rewards[sel], groups[sel], eps=0.0))


def test_zscore_in_a_group_has_zero_mean_and_unit_sample_std():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, generator=gen, dtype=F64)
    groups = ids(*([0] * 5 + [1] * 7))
    out = group_advantages(rewards, groups, eps=0.0)
    for g in (0, 1):
        sel = out[groups == g]
        assert_close(sel.mean(), torch.tensor(0.0, dtype=F64), rtol=0, atol=1e-12)
        assert_close(sel.std(), torch.tensor(1.0, dtype=F64))  # torch.std is the sample std


# ------------------------------------------------------------------------------------ centred


def test_centred_subtracts_the_group_mean_only():
    # group 0: 1, 2, 3, 4 -> mean 2.5 -> -1.5, -0.5, 0.5, 1.5
    # group 1: 10, 20 -> mean 15 -> -5, 5
    # group 2: 0.1 x3 -> exactly 0; group 3: alone -> 0
    rewards = r(1, 10, 2, 3, 20, 4, 0.1, 0.1, 0.1, 8)
    groups = ids(0, 1, 0, 0, 1, 0, 2, 2, 2, 3)
    out = centred(rewards, groups)
    assert_close(out, r(-1.5, -5, -0.5, 0.5, 5, 1.5, 0, 0, 0, 0))
    assert torch.equal(out[6:], torch.zeros(4, dtype=F64))
    assert_close(out, group_advantages(rewards, groups, scale_by_std=False))


def test_batch_centred_ignores_the_groups():
    # 1, 10, 2, 3: mean 4 over the batch, whatever the groups
    out = batch_centred(r(1, 10, 2, 3), ids(0, 1, 0, 7))
    assert_close(out, r(-3, 6, -2, -1))
    assert torch.equal(batch_centred(r(0.1, 0.1, 0.1), ids(0, 1, 2)), torch.zeros(3, dtype=F64))
    with pytest.raises(ValueError, match="2 rewards but 1 group ids"):
        batch_centred(r(1, 2), ids(0))


def test_designer_estimator_follows_centre_per_skill():
    rewards, skills = r(1, 3, 10, 20), ids(0, 0, 1, 1)
    per_skill = get_advantage_fn(designer_estimator(True))(rewards, skills)
    assert_close(per_skill, r(-1, 1, -5, 5))
    whole = get_advantage_fn(designer_estimator(False))(rewards, skills)
    assert_close(whole, r(-7.5, -5.5, 1.5, 11.5))  # mean 8.5 over all four attempts


# --------------------------------------------------------------------------- dtypes and edges


def test_dtype_and_device_are_kept_and_int_rewards_promoted():
    out = zscore(torch.tensor([0.0, 1.0], dtype=torch.float32), ids(0, 0))
    assert out.dtype == torch.float32
    # 0, 1: mean .5, centred -.5, .5; sample var .5, std .7071068 -> -+0.7071068
    assert_close(out, torch.tensor([-0.70710678, 0.70710678]), rtol=0, atol=1e-5)
    out = centred(torch.tensor([0, 2]), ids(0, 0))
    assert out.dtype == torch.get_default_dtype()
    assert_close(out, torch.tensor([-1.0, 1.0]))


def test_int32_group_ids_are_accepted():
    out = centred(r(1, 3), torch.tensor([4, 4], dtype=torch.int32))
    assert_close(out, r(-1, 1))


def test_empty_input():
    out = zscore(torch.zeros(0, dtype=F64), torch.zeros(0, dtype=torch.int64))
    assert out.shape == (0,) and out.dtype == F64


@pytest.mark.parametrize(
    ("rewards", "groups", "match"),
    [
        (torch.zeros(3), torch.zeros(2, dtype=torch.int64), "3 rewards but 2 group ids"),
        (torch.zeros(2, 2), torch.zeros(2, dtype=torch.int64), "1-D"),
        (torch.zeros(2), torch.zeros(2), "integer"),
        (torch.zeros(2), torch.zeros(2, dtype=torch.bool), "integer"),
    ],
)
def test_bad_inputs_raise(rewards, groups, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards, groups)


def test_negative_eps_raises():
    with pytest.raises(ValueError, match="eps"):
        group_advantages(r(1, 2), ids(0, 0), eps=-1.0)


# ----------------------------------------------------------------------------------- registry


def test_registry_by_name():
    assert set(ADVANTAGES) == {"zscore", "centred", "batch_centred"}
    assert get_advantage_fn("zscore") is zscore
    assert get_advantage_fn("centred") is centred
    assert_close(get_advantage_fn("centred")(r(1, 3), ids(0, 0)), r(-1, 1))


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(
        ValueError,
        match=r"unknown advantage estimator 'std'; valid: batch_centred, centred, zscore",
    ):
        get_advantage_fn("std")
