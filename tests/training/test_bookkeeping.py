"""Every sample trained with its own reward (issue 33): the bookkeeping between a round's
records and its training batch, each number worked out by hand here.

- a repaired design's first answer is trained with the reward of what it was (rejected), not
  with the repaired design's;
- a play cut into per-turn samples (a chat template that is not prefix-stable) weighs as one
  play in its environment's mean and std;
- a design sampled in several parts (follow-ups) weighs as one design in its skill's mean, and
  the designer's rewards are centred once;
- the reply that crashed its environment is trained on with the play's return;
- a group whose rewards are all equal gives no gradient.
"""

from __future__ import annotations

import math

import pytest

from spade.config import CampaignConfig, ScoringConfig
from spade.records import DesignAttempt, EnvEvaluation, Trajectory, Turn
from spade.scoring.outcomes import score
from spade.training.run import agent_samples, designer_samples

# a group of one 1 and one 0: z-scores +-0.5 / (sample std sqrt(0.5) + the estimator's 1e-6)
Z = 0.5 / (math.sqrt(0.5) + 1e-6)


def _turn(prompt: list[int], completion: list[int], reward: float = 0.0, done: bool = False):
    return Turn(prompt, completion, [-0.5] * len(completion), "t", "a", "o", reward, done,
                False, "stop", 0.0, 0.0)  # fmt: skip


def _stable_win(env: str) -> Trajectory:
    """Won in one turn; one sample on the prefix-stable path."""
    return Trajectory(env, 0, False, turns=[_turn([1, 2], [3, 4], 1.0, True)], status="terminated")


def _unstable_loss(env: str) -> Trajectory:
    """Lost after four turns whose prompts are re-rendered (not prefix-stable): four samples."""
    turns = [_turn([9, 8, 7 + i], [20 + i]) for i in range(4)]
    return Trajectory(env, 1, False, turns=turns, status="turn_limit")


def test_per_turn_samples_of_a_play_weigh_as_one_play():
    """Play A wins in 1 turn (whole-episode sample), play B loses in 4 (per-turn samples): the
    advantages are the plays' z-scores, +-1/sqrt(2); over the five samples they were +1.79 and
    -0.45 (a long episode weighed four times)."""
    win, loss = _stable_win("e"), _unstable_loss("e")
    assert win.token_view() is not None and loss.token_view() is None
    samples = agent_samples(CampaignConfig(), [win, loss])
    assert [s.reward for s in samples] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert [s.advantage for s in samples] == pytest.approx([Z, -Z, -Z, -Z, -Z])


def _attempt(slot: int, skill: str, parts: int, **more: object) -> DesignAttempt:
    """A design sampled in ``parts`` parts (a first answer and its follow-ups, as segments)."""
    att = DesignAttempt(slot, 0, skill, "d", [], **more)  # type: ignore[arg-type]
    for i in range(parts):
        att.add_segment([1, 2, 3 + i], [10 + slot, 11 + i], [-0.5, -0.5], "part")
    return att


def test_a_design_sampled_in_more_parts_weighs_as_one_design_and_is_centred_once():
    """Design X (one part, reward 1.0) and design Y (three parts, reward 0.0) of one skill:
    centred per design, +0.5 and -0.5 on every part; over the four samples the mean was 0.25
    (+0.75 and -0.25), and a second centring of rewards already centred moved them again."""
    x, y = _attempt(0, "logic", 1), _attempt(1, "logic", 3)
    samples = designer_samples(CampaignConfig(), [x, y], [1.0, 0.0])
    assert [s.advantage for s in samples] == pytest.approx([0.5, -0.5, -0.5, -0.5])


def test_a_repaired_designs_first_answer_gets_the_reward_of_what_it_was():
    """Its first answer had no code (parse), its repair was accepted and evaluated (mean
    return 0.5, regret 0.15: blend 1.0): the first answer is trained with the reward of a
    design without code, the repaired design is credited with 1.0."""
    config = ScoringConfig(rejected_reward="graded", centre_per_skill=False)
    repaired = DesignAttempt(
        0, 0, "logic", "d", [], completion="no code here", code="class AEnv: ...",
        env_id="env-a", accepted=True, first_failure_kind="parse",
        repair_messages=[{"role": "user", "content": "why"},
                         {"role": "assistant", "content": "fixed"}],
    )  # fmt: skip
    evaluation = EnvEvaluation("env-a", "logic", [1.0, 1.0], [1.0, 0.0], 0.5, 1.0, 0.15, 0)
    (s,), _ = score([repaired], [evaluation], config)
    assert s.raw_reward == pytest.approx(1.0) and s.reward == pytest.approx(1.0)
    assert s.trained_raw == pytest.approx(-6 / 7)  # graded: no code, no progress


def _crashed(env: str) -> Trajectory:
    """Broke its environment on the first step: the reply is its one turn, return 0."""
    turn = _turn([1, 2], [5, 6])
    return Trajectory(env, 2, False, turns=[turn], status="env_failed",
                      failure={"kind": "crash", "reason": "x"})  # fmt: skip


def test_a_whole_rounds_batch_every_sample_with_its_own_reward_and_advantage():
    """A round, by hand: designs with and without repair and follow-ups, scored with their
    evaluations; plays on both token paths, a crash, and an environment whose plays all lost
    (no gradient). Every sample's reward and advantage below is worked out by hand."""
    config = CampaignConfig.model_validate(
        {"scoring": {"rejected_reward": "graded", "centre_per_skill": True}}
    )
    # designs: logic has a plain accepted design (blend 1.0: mean 0.5, regret 0.15), a
    # repaired one (first answer: no code, -6/7; accepted after repair, blend 1.0), both one
    # part; math has a design in three parts (rejected: syntax, progress 0, -5/7) and a plain
    # rejected one (no code, -6/7)
    plain = _attempt(0, "logic", 1, code="c0", env_id="env-0", accepted=True)
    repaired = _attempt(
        1, "logic", 1, code="c1", env_id="env-1", accepted=True, completion="nothing",
        first_failure_kind="parse",
        repair_messages=[{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}],
    )  # fmt: skip
    parts = _attempt(2, "math", 3, failure_kind="syntax", code="def (")
    nocode = _attempt(3, "math", 1, failure_kind="parse", completion="")
    evaluations = [
        EnvEvaluation(f"env-{i}", "logic", [1.0, 1.0], [1.0, 0.0], 0.5, 1.0, 0.15, 0)
        for i in (0, 1)
    ]
    attempts = [plain, repaired, parts, nocode]
    scored, _ = score(attempts, evaluations, config.scoring)
    trained = [s.trained_raw for s in scored]
    assert trained == pytest.approx([1.0, -6 / 7, -5 / 7, -6 / 7])
    designs = designer_samples(config, attempts, trained)
    # logic: mean (1 - 6/7) / 2 = 1/14; math: mean (-5/7 - 6/7) / 2 = -11/14
    logic = [1.0 - 1 / 14, -6 / 7 - 1 / 14]
    math_ = [-5 / 7 + 11 / 14] * 3 + [-6 / 7 + 11 / 14]
    assert [s.group for s in designs] == ["logic", "logic", "math", "math", "math", "math"]
    assert [s.advantage for s in designs] == pytest.approx(logic + math_)

    # plays: env A, a win (whole) and a 4-turn loss (per turn); env B, a win and a crash (its
    # reply kept); env C, two losses (all equal: no gradient); a hinted play (never trained)
    hinted = Trajectory("A", 3, True, turns=[_turn([1], [2], 1.0, True)], status="terminated")
    plays = [_stable_win("A"), _unstable_loss("A"), _stable_win("B"), _crashed("B"),
             _unstable_loss("C"), _unstable_loss("C"), hinted]  # fmt: skip
    agent = agent_samples(config, plays)
    assert [(s.group, s.reward) for s in agent] == [
        ("A", 1.0), *[("A", 0.0)] * 4, ("B", 1.0), ("B", 0.0), *[("C", 0.0)] * 8
    ]  # fmt: skip
    assert [s.advantage for s in agent] == pytest.approx([Z, -Z, -Z, -Z, -Z, Z, -Z, *[0.0] * 8])


def test_the_designers_advantages_are_not_rescaled_to_the_agents():
    """Point 9, kept by measurement (bench/role_steps.py, docs/architecture.md §2.9): the
    reference multiplies designer rewards by env_reward_scale (plays x regeneration interval, at
    most 50: 32 in the games preset). Here they stay the centred rewards: at the presets'
    grad_clip both roles' gradients reach the clip, so a x32 scale clips back to the same step,
    and one AdamW already moves the designer about as far per update as the agent."""
    config = CampaignConfig.model_validate(
        {"evaluation": {"unhinted_plays": 8}, "run": {"regen_interval": 4}}
    )
    x, y = _attempt(0, "logic", 1), _attempt(1, "logic", 1)
    samples = designer_samples(config, [x, y], [0.3, 0.1])
    assert [s.advantage for s in samples] == pytest.approx([0.1, -0.1])
