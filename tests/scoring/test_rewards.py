"""Designer rewards, their centring per skill and the win-rate EMA, against hand-computed values."""

import itertools

import pytest

from spade.config import ScoringConfig
from spade.scoring.rewards import (
    DESIGNER_REWARDS,
    REJECTED_REWARDS,
    REJECTED_TIERS,
    DesignOutcome,
    blend,
    centre_per_skill,
    designer_rewards,
    designer_rewards_with_raw,
    flat_rejected,
    get_designer_reward,
    get_rejected_reward,
    graded_rejected,
    learning_potential,
    plateau,
    rejected_tier,
    update_ema,
)


def valid(
    env_id: str, skill: str, win: float, regret: float, mean: float | None = None
) -> DesignOutcome:
    """A valid design; its mean return is its win rate unless given (plays end at 0 or 1)."""
    mean_return = win if mean is None else mean
    return DesignOutcome(
        env_id, skill, valid=True, win_rate=win, regret=regret, mean_return=mean_return
    )


def invalid(
    env_id: str, skill: str, kind: str = "bad_signature", progress: float = 0.0
) -> DesignOutcome:
    return DesignOutcome(env_id, skill, valid=False, failure_kind=kind, progress=progress)


# ------------------------------------------------------------------------------------ plateau


@pytest.mark.parametrize(
    ("win", "expected"),
    [
        (0.4, 1.0),  # low edge: on the plateau
        (0.6, 1.0),  # high edge: on the plateau
        (0.5, 1.0),
        (0.15, 0.0),  # low - ramp = 0.4 - 0.25: the ramp's foot
        (0.85, 0.0),  # high + ramp = 0.6 + 0.25
        (0.0, 0.0),  # beyond the ramp
        (1.0, 0.0),
        (0.3, 0.6),  # 1 - (0.4 - 0.3) / 0.25 = 1 - 0.4
        (0.7, 0.6),  # 1 - (0.7 - 0.6) / 0.25
        (0.35, 0.8),  # 1 - 0.05 / 0.25
    ],
)
def test_plateau_defaults(win, expected):
    assert plateau(win) == pytest.approx(expected)


def test_plateau_custom_band():
    # 1 on [0.2, 0.3]; 0.45 is 0.15 above over a ramp of 0.5 -> 1 - 0.3 = 0.7
    assert plateau(0.45, low=0.2, high=0.3, ramp=0.5) == pytest.approx(0.7)
    assert plateau(0.2, low=0.2, high=0.3, ramp=0.5) == 1.0


def test_plateau_rejects_bad_band():
    with pytest.raises(ValueError, match="low <= high"):
        plateau(0.5, low=0.7, high=0.6)
    with pytest.raises(ValueError, match="ramp > 0"):
        plateau(0.5, ramp=0.0)


# -------------------------------------------------------------------------- scalar rewards


def test_blend_on_the_plateau_half_scale_regret():
    # 0.6 * 1 + 0.4 * (0.075 / 0.15 = 0.5) = 0.6 + 0.2 = 0.8
    assert blend(0.5, 0.075) == pytest.approx(0.8)


def test_blend_clips_regret_above_scale():
    # plateau(0.3) = 0.6; regret 0.3 / 0.15 = 2 -> clipped to 1: 0.6 * 0.6 + 0.4 * 1 = 0.76
    assert blend(0.3, 0.3) == pytest.approx(0.76)


def test_blend_off_plateau_no_regret_is_zero():
    # plateau(0.95) = 0 and regret 0 -> 0
    assert blend(0.95, 0.0) == 0.0


def test_blend_custom_weights():
    # 0.5 * plateau(0.5)=1 + 0.5 * clip(0.1 / 0.2 = 0.5) = 0.5 + 0.25 = 0.75
    assert blend(0.5, 0.1, plateau_weight=0.5, regret_scale=0.2) == pytest.approx(0.75)


def test_learning_potential_without_history_is_zero_and_starts_ema():
    assert learning_potential(0.7, None) == (0.0, 0.7)


def test_learning_potential_with_history():
    # |0.8 - 0.5| = 0.3; new ema = 0.9 * 0.5 + 0.1 * 0.8 = 0.53
    reward, ema = learning_potential(0.8, 0.5, alpha=0.1)
    assert reward == pytest.approx(0.3)
    assert ema == pytest.approx(0.53)


def test_learning_potential_rejects_bad_alpha():
    with pytest.raises(ValueError, match="alpha"):
        learning_potential(0.5, 0.5, alpha=0.0)


# ------------------------------------------------------------------------------- registry


def test_registry_names_match_config_choices():
    assert set(DESIGNER_REWARDS) == {"blend", "regret", "solve_rate", "learning_potential"}


def test_unknown_reward_lists_valid_names():
    with pytest.raises(ValueError, match=r"'novelty'.*valid: blend, learning_potential"):
        get_designer_reward("novelty")


# ----------------------------------------------------------------------------- outcomes


def test_valid_outcome_needs_rates():
    with pytest.raises(ValueError, match="needs a win_rate, a regret and a mean_return"):
        DesignOutcome("e", "optimization", valid=True, win_rate=0.5, regret=0.1)


@pytest.mark.parametrize("reward", ["blend", "solve_rate"])
def test_the_plateau_reads_the_mean_return_so_partial_credit_counts(reward):
    """Every play ends at 0.5: no play wins (win rate 0), the mean return sits mid-plateau.
    The reference's blend puts its plateau on the mean reward; on the win rate this design
    scored as if nobody got anywhere."""
    config = ScoringConfig(designer_reward=reward, centre_per_skill=False)
    half = valid("half", "logic", win=0.0, regret=0.0, mean=0.5)
    nothing = valid("zero", "logic", win=0.0, regret=0.0, mean=0.0)
    (got_half, got_nothing), _ = designer_rewards([half, nothing], config)
    expected = ScoringConfig().plateau_weight if reward == "blend" else 1.0
    assert got_half == pytest.approx(expected) and got_nothing == 0.0


def test_valid_outcome_cannot_have_failure_kind():
    with pytest.raises(ValueError, match="failure_kind"):
        DesignOutcome("e", "s", valid=True, failure_kind="timeout", win_rate=0.5, regret=0.0)


@pytest.mark.parametrize(
    "kwargs",
    [{"win_rate": 1.5}, {"hinted_win_rate": -0.1}, {"regret": -0.1}, {"mean_return": 1.5}],
)
def test_outcome_ranges_are_checked(kwargs):
    with pytest.raises(ValueError, match="design 'e'"):
        DesignOutcome("e", "s", valid=False, **kwargs)


# ----------------------------------------------------------------------- designer_rewards


def test_blend_batch_centred_per_skill_includes_invalid_designs():
    outcomes = [
        valid("a1", "logic", 0.5, 0.15),  # 0.6 * 1 + 0.4 * 1 = 1.0
        valid("a2", "logic", 0.3, 0.0),  # 0.6 * 0.6 + 0 = 0.36
        invalid("a3", "logic"),  # invalid_reward 0.0
        valid("b1", "maths", 0.95, 0.0),  # 0.0
        invalid("b2", "maths", kind="timeout"),  # timeout_penalty -0.5
    ]
    rewards, _ = designer_rewards(outcomes, ScoringConfig())
    # logic mean = (1.0 + 0.36 + 0.0) / 3 = 0.45333...; maths mean = (0 - 0.5) / 2 = -0.25
    expected = [1.0 - 1.36 / 3, 0.36 - 1.36 / 3, -1.36 / 3, 0.25, -0.25]
    assert rewards == pytest.approx(expected)


def test_uncentred_rewards_keep_raw_values_and_penalties():
    config = ScoringConfig(centre_per_skill=False, invalid_reward=-0.1, timeout_penalty=-0.7)
    outcomes = [valid("a", "s", 0.5, 0.075), invalid("b", "s"), invalid("c", "s", "timeout")]
    rewards, _ = designer_rewards(outcomes, config)
    # 0.6 + 0.4 * 0.5 = 0.8; invalid -0.1; timeout -0.7
    assert rewards == pytest.approx([0.8, -0.1, -0.7])


def test_failure_kind_enum_value_counts_as_timeout():
    from spade.records import FailureKind

    config = ScoringConfig(centre_per_skill=False)
    rewards, _ = designer_rewards([invalid("t", "s", FailureKind.TIMEOUT)], config)
    assert rewards == [-0.5]


def test_single_design_in_a_skill_is_centred_to_zero():
    rewards, _ = designer_rewards([valid("a", "s", 0.5, 0.15)], ScoringConfig())
    assert rewards == [0.0]


def test_one_skill_only():
    outcomes = [valid("a", "s", 0.5, 0.0), valid("b", "s", 0.0, 0.0)]
    # raw: 0.6 and 0.0; mean 0.3 -> +0.3, -0.3
    rewards, _ = designer_rewards(outcomes, ScoringConfig())
    assert rewards == pytest.approx([0.3, -0.3])


def test_all_plays_failed_design():
    # every play failed: win 0, regret 0 (0 - 0) -> plateau(0) = 0 and regret part 0
    config = ScoringConfig(centre_per_skill=False)
    rewards, _ = designer_rewards([valid("a", "s", 0.0, 0.0)], config)
    assert rewards == [0.0]


def test_regret_reward_is_regret():
    config = ScoringConfig(designer_reward="regret", centre_per_skill=False)
    rewards, _ = designer_rewards([valid("a", "s", 0.9, 0.4), valid("b", "s", 0.1, 0.0)], config)
    assert rewards == pytest.approx([0.4, 0.0])


def test_solve_rate_reward_is_plateau_only():
    config = ScoringConfig(designer_reward="solve_rate", centre_per_skill=False)
    # plateau(0.7) = 0.6 whatever the regret; plateau(0.6) = 1 (edge)
    rewards, _ = designer_rewards([valid("a", "s", 0.7, 1.0), valid("b", "s", 0.6, 0.0)], config)
    assert rewards == pytest.approx([0.6, 1.0])


def test_learning_potential_batch_uses_ema_before_the_batch():
    config = ScoringConfig(designer_reward="learning_potential", centre_per_skill=False)
    outcomes = [valid("a", "s", 0.8, 0.0), valid("b", "s", 0.2, 0.0), valid("c", "new", 0.9, 0.0)]
    rewards, ema = designer_rewards(outcomes, config, {"s": 0.5, "other": 0.3})
    # s: |0.8 - 0.5| = 0.3, |0.2 - 0.5| = 0.3; "new" has no history -> 0
    assert rewards == pytest.approx([0.3, 0.3, 0.0])
    # s: batch mean 0.5 -> 0.9 * 0.5 + 0.1 * 0.5 = 0.5; new starts at 0.9; other untouched
    assert ema == pytest.approx({"s": 0.5, "new": 0.9, "other": 0.3})


def test_ema_is_updated_whatever_the_reward_and_input_not_mutated():
    previous = {"s": 1.0}
    _, ema = designer_rewards(
        [valid("a", "s", 0.0, 0.0), invalid("b", "s")], ScoringConfig(), previous
    )
    # only the valid design counts: 0.9 * 1.0 + 0.1 * 0.0 = 0.9
    assert ema == pytest.approx({"s": 0.9})
    assert previous == {"s": 1.0}


def test_no_history_returns_empty_ema_for_invalid_only_batch():
    rewards, ema = designer_rewards([invalid("a", "s")], ScoringConfig(), None)
    assert rewards == [0.0]
    assert ema == {}


def test_empty_batch():
    assert designer_rewards([], ScoringConfig(), {"s": 0.4}) == ([], {"s": 0.4})


def test_update_ema_averages_the_batch_per_skill():
    outcomes = [valid("a", "s", 1.0, 0.0), valid("b", "s", 0.0, 0.0)]
    # batch mean 0.5; 0.8 * 0.2 + 0.2 * 0.5 = 0.26
    assert update_ema({"s": 0.2}, outcomes, alpha=0.2) == pytest.approx({"s": 0.26})


def test_centre_per_skill_helper():
    # a: (1 + 3) / 2 = 2 -> -1, +1; b alone -> 0
    assert centre_per_skill([1.0, 5.0, 3.0], ["a", "b", "a"]) == pytest.approx([-1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="2 rewards but 1 skills"):
        centre_per_skill([1.0, 2.0], ["a"])


# ------------------------------------------------------------------- rejected designs (graded)

GRADED = ScoringConfig(rejected_reward="graded", centre_per_skill=False)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("duplicate", -1.0),  # a copy, lowest: copying must not pay (-1 * 7/7)
        ("parse", -6 / 7),
        ("syntax", -5 / 7),
        ("import_denied", -4 / 7),
        ("policy_denied", -4 / 7),
        ("contract", -3 / 7),
        ("exited", -3 / 7),
        ("protocol", -3 / 7),
        ("crash", -2 / 7),
        ("timeout", -2 / 7),
        ("memory", -2 / 7),
        ("output_limit", -2 / 7),
        ("infeasible", -1 / 7),
        ("trivial", -1 / 7),
        ("nondeterministic", -1 / 7),
        ("no_termination", -1 / 7),
        ("seed_independent", -1 / 7),
    ],
)
def test_graded_rejections_by_how_far_they_got(kind, expected):
    assert graded_rejected(kind, 0.0, GRADED) == pytest.approx(expected)
    rewards, _ = designer_rewards([invalid("x", "s", kind)], GRADED)
    assert rewards == pytest.approx([expected])


def test_progress_within_a_tier_ranks_equal_failures_and_never_reaches_the_next_tier():
    kinds = [t[0] for t in REJECTED_TIERS]
    for low, high in itertools.pairwise(kinds):
        shallow, deep = graded_rejected(low, 0.25, GRADED), graded_rejected(low, 1.0, GRADED)
        assert (
            graded_rejected(low, 0.0, GRADED) < shallow < deep < graded_rejected(high, 0.0, GRADED)
        )
    # two crashes of one round, at reset (3 of 12 checks) and at feasibility (8 of 12): told
    # apart, so the designer gets an update where equal rewards would give it none
    crashes = [invalid("a", "s", "crash", 3 / 12), invalid("b", "s", "crash", 8 / 12)]
    rewards, _ = designer_rewards(crashes, ScoringConfig(rejected_reward="graded"))  # centred
    assert rewards[0] < 0 < rewards[1]
    assert flat_rejected("crash", 1.0, GRADED) == flat_rejected("crash", 0.0, GRADED)
    with pytest.raises(ValueError, match="progress"):
        graded_rejected("crash", 1.5, GRADED)


def test_graded_floor_scales_every_tier():
    config = ScoringConfig(rejected_reward="graded", graded_floor=-2.0)
    # -2 * 7/7, ..., -2 * 1/7
    kinds = ["duplicate", "parse", "syntax", "import_denied", "contract", "crash", "trivial"]
    assert [graded_rejected(k, 0.0, config) for k in kinds] == pytest.approx(
        [-2.0, -12 / 7, -10 / 7, -8 / 7, -6 / 7, -4 / 7, -2 / 7]
    )


def test_every_failure_kind_has_a_tier():
    from spade.records import FailureKind

    placed = {kind for tier in REJECTED_TIERS for kind in tier}
    assert {str(k) for k in FailureKind} <= placed
    assert len(placed) == sum(len(t) for t in REJECTED_TIERS)  # each kind in one tier only
    assert rejected_tier("seed_independent") == rejected_tier(FailureKind.INFEASIBLE) == 6
    assert rejected_tier("duplicate") == 0 and rejected_tier("parse") == 1
    with pytest.raises(ValueError, match="no place"):  # an outage is no design: never scored
        rejected_tier("inference")


def test_an_unknown_failure_kind_is_an_error_not_a_guess():
    with pytest.raises(ValueError, match="'bad_signature' has no place"):
        designer_rewards([invalid("x", "s", "bad_signature")], GRADED)


def test_every_graded_rejection_is_below_every_valid_design():
    """The highest tier is below 0 and no valid design's reward is below 0 (every reward
    function at its lowest: win rate off the plateau, no regret, no EMA gap)."""
    worst_valid = [
        designer_rewards(
            [valid("a", "s", win, 0.0)], ScoringConfig(designer_reward=name, centre_per_skill=False)
        )[0][0]
        for name in DESIGNER_REWARDS
        for win in (0.0, 1.0)
    ]
    best_rejected = max(graded_rejected(t[0], 1.0, GRADED) for t in REJECTED_TIERS)
    assert best_rejected == pytest.approx(-0.5 / 7) and min(worst_valid) == 0.0


def test_graded_centred_within_a_skill_keeps_the_order():
    config = ScoringConfig(rejected_reward="graded")  # centred per skill
    outcomes = [
        invalid("a", "s", "duplicate"),  # -1.0
        invalid("b", "s", "crash"),  # -2/7
        valid("c", "s", 0.5, 0.0),  # 0.6 * 1 = 0.6
        invalid("d", "t", "syntax"),  # alone in its skill: 0
    ]
    rewards, _ = designer_rewards(outcomes, config)
    mean = (-1.0 - 2 / 7 + 0.6) / 3
    assert rewards == pytest.approx([-1.0 - mean, -2 / 7 - mean, 0.6 - mean, 0.0])
    assert rewards[0] < rewards[1] < rewards[2]


def test_nothing_accepted_still_gives_the_designer_a_signal():
    """A round whose attempts all failed, at different depths: flat gives every one 0 (no
    advantage), graded gives them different rewards (non-zero advantages after centring)."""
    outcomes = [invalid("a", "s", "parse"), invalid("b", "s", "infeasible")]
    flat, _ = designer_rewards(outcomes, ScoringConfig())
    graded, _ = designer_rewards(outcomes, ScoringConfig(rejected_reward="graded"))
    assert flat == [0.0, 0.0]
    assert graded == pytest.approx([-5 / 14, 5 / 14])  # -6/7 and -1/7 around their mean -1/2
    # a copy and a cut-off answer (the 0.5B coder's usual pair) differ too
    pair = [invalid("a", "s", "duplicate"), invalid("b", "s", "parse")]
    graded, _ = designer_rewards(pair, ScoringConfig(rejected_reward="graded"))
    assert graded == pytest.approx([-1 / 14, 1 / 14])  # -1 and -6/7


def test_raw_rewards_are_the_rewards_before_centring():
    outcomes = [invalid("a", "s", "duplicate"), valid("b", "s", 0.5, 0.15)]
    raw, centred, _ = designer_rewards_with_raw(outcomes, ScoringConfig(rejected_reward="graded"))
    assert raw == pytest.approx([-1.0, 1.0]) and centred == pytest.approx([-1.0, 1.0])
    raw, centred, _ = designer_rewards_with_raw(outcomes[:1], ScoringConfig())
    assert (raw, centred) == ([0.0], [0.0])


def test_rejected_registry_names_match_config_choices():
    from typing import get_args

    choices = get_args(ScoringConfig.model_fields["rejected_reward"].annotation)
    assert set(REJECTED_REWARDS) == set(choices) == {"flat", "graded"}
    assert get_rejected_reward("flat") is flat_rejected
    with pytest.raises(ValueError, match="valid: flat, graded"):
        get_rejected_reward("steep")
