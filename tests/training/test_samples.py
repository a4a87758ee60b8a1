"""Training samples: builders, advantages, micro-batching and the one-token collate shift."""

from __future__ import annotations

import pytest
import torch

from spade.records import DesignAttempt, Trajectory, Turn
from spade.training.samples import (
    TrainSample,
    assign_advantages,
    collate,
    completion_sample,
    micro_batches,
    samples_from_design_attempts,
    samples_from_trajectories,
)
from spade.training.scoring import token_logprobs
from tests.training.tiny_task import PAD, own_logprobs, tiny_llama


def _turn(prompt, completion, reward=0.0, terminated=False, lp=-0.5):
    return Turn(prompt, completion, [lp] * len(completion), "t", "a", "o", reward, terminated,
                False, "stop", 0.0, 0.0)  # fmt: skip


def _episode(env_id, turns, *, hinted=False, status="terminated"):
    return Trajectory(env_id, 0, hinted, turns=turns, status=status)


# ------------------------------------------------------------------------------- completions


def test_a_completion_sample_masks_its_prompt_and_keeps_the_sampler_logprobs():
    s = completion_sample([7, 8, 9], [3, 4], [-0.25, -1], 1, "g")
    assert s.input_ids == [7, 8, 9, 3, 4] and s.loss_mask == [0, 0, 0, 1, 1]
    assert s.behaviour_logprobs == [0.0, 0.0, 0.0, -0.25, -1.0] and s.reward == 1.0
    with pytest.raises(ValueError, match="where: 3 tokens but 2 log-probs"):
        completion_sample([7], [3, 4], [-0.25], 0.0, "g", "where")


# ------------------------------------------------------------------------------- trajectories


def test_prefix_stable_episode_is_one_sample_with_the_token_view():
    t = _episode(
        "env-a", [_turn([1, 2], [3, 4]), _turn([1, 2, 3, 4, 5], [6], reward=0.5, terminated=True)]
    )
    [s] = samples_from_trajectories([t])
    assert s.input_ids == [1, 2, 3, 4, 5, 6]
    assert s.loss_mask == [0, 0, 1, 1, 0, 1]  # observations (token 5) are not trained on
    assert s.behaviour_logprobs == [0.0, 0.0, -0.5, -0.5, 0.0, -0.5]
    assert (s.reward, s.group, s.advantage) == (0.5, "env-a", None)
    assert s.trained_tokens == 3


def test_hinted_plays_are_never_trained_on_by_default():
    plain = _episode("e", [_turn([1], [2], reward=1.0, terminated=True)])
    hinted = _episode("e", [_turn([1, 7], [2], reward=1.0, terminated=True)], hinted=True)
    assert [s.input_ids for s in samples_from_trajectories([plain, hinted])] == [[1, 2]]
    assert len(samples_from_trajectories([plain, hinted], only_unhinted=False)) == 2


def test_unstable_template_falls_back_to_one_sample_per_turn_with_the_episode_return():
    t = _episode("e", [_turn([1, 2], [3]), _turn([9, 9, 9], [6, 7], reward=3.0, terminated=True)])
    first, second = samples_from_trajectories([t])
    assert (first.input_ids, first.loss_mask) == ([1, 2, 3], [0, 0, 1])
    assert (second.input_ids, second.loss_mask) == ([9, 9, 9, 6, 7], [0, 0, 0, 1, 1])
    assert first.reward == second.reward == 1.0  # return: last reward clipped to [-1, 1]


def test_unfinished_episode_returns_zero_and_empty_episodes_are_skipped():
    unfinished = _episode("e", [_turn([1], [2], reward=1.0)], status="turn_limit")
    nothing = _episode("e", [], status="env_failed")
    [s] = samples_from_trajectories([unfinished, nothing])
    assert s.reward == 0.0


def test_a_turn_with_missing_logprobs_is_refused():
    bad = _turn([1], [2, 3])
    bad.logprobs = [-0.1]
    with pytest.raises(ValueError, match="log-probs"):
        samples_from_trajectories([_episode("e", [bad, _turn([5], [6])])])


# ---------------------------------------------------------------------------------- designs


def _attempt(skill, prompt, completion, slot=0):
    return DesignAttempt(slot=slot, attempt=0, skill=skill, doc_id="d", messages=[],
                         prompt_token_ids=prompt, token_ids=completion,
                         logprobs=[-0.25] * len(completion))  # fmt: skip


def test_design_attempts_train_on_the_completion_grouped_by_skill():
    attempts = [
        _attempt("logic", [1, 2, 3], [4, 5]),
        _attempt("math", [1], [6]),
        _attempt("logic", [1], []),
    ]
    samples = samples_from_design_attempts(attempts, [0.3, -0.2, 0.0])
    assert len(samples) == 2  # the attempt without completion tokens is skipped
    assert samples[0].input_ids == [1, 2, 3, 4, 5] and samples[0].loss_mask == [0, 0, 0, 1, 1]
    assert samples[0].behaviour_logprobs == [0.0, 0.0, 0.0, -0.25, -0.25]
    assert [(s.group, s.reward) for s in samples] == [("logic", 0.3), ("math", -0.2)]
    with pytest.raises(ValueError, match="rewards"):
        samples_from_design_attempts(attempts, [0.0])
    failed = _attempt("logic", [1], [7])  # a repair request failed: first answer's tokens
    failed.failure_kind = "inference"
    with pytest.raises(ValueError, match="failed"):  # the caller pairs only measured attempts
        samples_from_design_attempts([failed], [0.0])


def test_sample_validation():
    with pytest.raises(ValueError, match="equal"):
        TrainSample([1, 2], [0, 1], [0.0], 1.0, "g")
    with pytest.raises(ValueError, match="first token"):
        TrainSample([1, 2], [1, 1], [0.0, 0.0], 1.0, "g")
    with pytest.raises(ValueError, match="0/1"):
        TrainSample([1, 2], [0, 2], [0.0, 0.0], 1.0, "g")
    with pytest.raises(ValueError, match="finite"):
        TrainSample([1, 2], [0, 1], [0.0, 0.0], float("nan"), "g")


# ------------------------------------------------------------------------------- advantages


def test_advantages_are_group_relative():
    samples = [TrainSample([1, 2], [0, 1], [0.0, 0.0], r, g) for r, g in
               [(1.0, "a"), (0.0, "a"), (5.0, "b"), (5.0, "b"), (2.0, "c")]]  # fmt: skip
    assign_advantages(samples, "zscore")
    adv = [s.advantage for s in samples]
    assert adv[0] == pytest.approx(0.5 / (2**0.5 / 2), rel=1e-5) and adv[1] == pytest.approx(
        -adv[0]
    )
    assert adv[2:] == [0.0, 0.0, 0.0]  # all-equal group and group of one: no signal
    assign_advantages(samples, scale_by_std=False)
    assert [s.advantage for s in samples][:2] == [0.5, -0.5]
    with pytest.raises(ValueError, match="unknown advantage"):
        assign_advantages(samples, "nope")


# --------------------------------------------------------------------------------- batching


def _of_lengths(*lengths):
    return [TrainSample(list(range(1, n + 1)), [0] + [1] * (n - 1), [0.0] * n, 0.0, "g", 0.0)
            for n in lengths]  # fmt: skip


def test_micro_batches_respect_the_budget_longest_first():
    samples = _of_lengths(5, 9, 3, 9, 4, 12, 2, 7)
    batches = micro_batches(samples, 20)
    assert sorted(i for b in batches for i in b) == list(range(8))  # each sample exactly once
    for b in batches:
        assert max(len(samples[i]) for i in b) * len(b) <= 20
    assert batches[0] == [5]  # 12 + 9 > 20: the longest goes alone
    assert batches[1] == [1, 3]  # then the two 9s (ties in input order)
    lengths = [len(samples[b[0]]) for b in batches]
    assert lengths == sorted(lengths, reverse=True)


def test_a_sample_over_the_budget_gets_a_micro_batch_of_its_own():
    samples = _of_lengths(3, 50, 3)
    assert micro_batches(samples, 10) == [[1], [0, 2]]
    assert micro_batches([], 10) == []
    with pytest.raises(ValueError):
        micro_batches(samples, 0)


def test_collate_shifts_per_token_values_to_the_predicting_position():
    a = TrainSample([10, 11, 12, 13], [0, 0, 1, 1], [0.0, 0.0, -1.5, -2.5], 1.0, "g", 0.7)
    b = TrainSample([20, 21], [0, 1], [0.0, -0.25], 0.0, "g", -0.7)
    batch = collate([a, b], pad_id=PAD)
    assert batch["input_ids"].tolist() == [[10, 11, 12, 13], [20, 21, PAD, PAD]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    # position t predicts token t + 1
    assert batch["target_ids"].tolist() == [[11, 12, 13, PAD], [21, PAD, PAD, PAD]]
    assert batch["loss_mask"].tolist() == [[0, 1, 1, 0], [1, 0, 0, 0]]
    assert batch["behaviour_logprobs"].tolist() == [[0.0, -1.5, -2.5, 0.0], [-0.25, 0.0, 0.0, 0.0]]
    assert batch["advantages"].tolist() == pytest.approx([0.7, -0.7])
    with pytest.raises(ValueError, match="assign_advantages"):
        collate([TrainSample([1, 2], [0, 1], [0.0, 0.0], 0.0, "g")], PAD)


def test_model_logprobs_at_the_shifted_positions_match_prefix_by_prefix_logprobs():
    """The trainer's gather on a right-padded batch reproduces what a sampler reports."""
    model = tiny_llama()
    long_ids, short_ids = [1, 5, 9, 13, 40, 41, 42, 43], [1, 7, 50, 51]
    samples = [
        TrainSample(ids, [0] * 2 + [1] * (len(ids) - 2), own_logprobs(model, ids, 2), 0.0, "g", 0.0)
        for ids in (long_ids, short_ids)
    ]
    batch = collate(samples, PAD)
    with torch.no_grad():
        lp, entropy = token_logprobs(model, batch, entropy=True)
    m = batch["loss_mask"].bool()
    assert torch.allclose(lp[m], batch["behaviour_logprobs"][m], atol=1e-5)
    assert entropy is not None and entropy.shape == lp.shape
    assert bool((entropy[m] > 0).all()) and bool(
        (entropy[m] <= torch.log(torch.tensor(64.0)) + 1e-4).all()
    )


def test_flat_groups_are_those_whose_advantages_are_all_zero():
    from spade.training.samples import TrainSample, assign_advantages, flat_group_share

    def sample(reward: float, group: str) -> TrainSample:
        return TrainSample([1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], reward, group)

    batch = [
        sample(1.0, "a"),
        sample(0.0, "a"),
        sample(0.5, "b"),
        sample(0.5, "b"),
        sample(1.0, "c"),
    ]  # fmt: skip  (a: signal; b: rewards equal; c: alone)
    assign_advantages(batch)
    assert flat_group_share(batch) == 2 / 3
    assert flat_group_share([]) == 0.0
    with pytest.raises(ValueError, match="no advantage"):
        flat_group_share([sample(1.0, "a")])


def test_replies_without_token_ids_are_counted_as_dropped():
    from spade.training.samples import missing_token_ids

    def turn(text: str, ids: list[int]) -> Turn:
        return Turn([1, 2], ids, [-1.0] * len(ids), text, text, "obs", 0.0, False, False,
                    "stop", 0.0, 0.0)  # fmt: skip

    play = Trajectory("env", 0, False, turns=[turn("a", []), turn("", []), turn("b", [5])])
    hinted = Trajectory("env", 0, True, turns=[turn("a", [])])  # never trained: not dropped
    assert missing_token_ids(trajectories=[play, hinted]) == 1
    bare = DesignAttempt(slot=0, attempt=0, skill="s", doc_id="d", messages=[], completion="x")
    kept = DesignAttempt(slot=1, attempt=0, skill="s", doc_id="d", messages=[], completion="y",
                         prompt_token_ids=[1], token_ids=[2], logprobs=[-1.0])  # fmt: skip
    assert missing_token_ids(attempts=[bare, kept]) == 1
