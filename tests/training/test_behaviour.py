"""Importance-ratio statistics of the sampler's log-probs against the trained policy's."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from spade.training.behaviour import ratio_stats, samples_ratio_stats
from tests.training.tiny_task import PAD, tiny_llama, varied_samples


def test_ratio_stats_of_known_ratios() -> None:
    train = torch.tensor([[0.0, -1.0, -2.0], [-0.5, -0.5, -0.5]])
    behaviour = train - torch.tensor([[7.0, math.log(3), -math.log(2)], [0.0, 0.0, 9.0]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]])  # ratios 3, 0.5 and 1; masked ones ignored
    stats = ratio_stats(train, behaviour, mask, is_cap=2.0)
    assert stats.tokens == 3
    assert stats.mean == pytest.approx(1.5) and stats.min == pytest.approx(0.5)
    assert stats.max == pytest.approx(3.0)
    assert stats.p99 == pytest.approx(1.0 + 0.98 * 2.0)  # linear between the two largest
    assert stats.truncated_share == pytest.approx(1 / 3)
    assert stats.mean_abs_gap == pytest.approx((math.log(3) + math.log(2)) / 3)
    assert ratio_stats(train, behaviour, mask, is_cap=0.0).truncated_share == 0.0  # cap off
    with pytest.raises(ValueError, match="no trained tokens"):
        ratio_stats(train, behaviour, torch.zeros_like(mask), is_cap=2.0)


def test_a_sampler_with_the_trained_weights_has_ratio_one_and_a_shifted_one_does_not() -> None:
    model = tiny_llama()
    samples = varied_samples()
    own = []
    for s in samples:  # behaviour log-probs as a sampler running these very weights reports them
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([s.input_ids])).logits[0].float()
        lp = torch.log_softmax(logits, dim=-1)
        beh = [0.0] + [float(lp[t - 1, s.input_ids[t]]) for t in range(1, len(s))]
        own.append(dataclasses.replace(s, behaviour_logprobs=beh))
    same = samples_ratio_stats(model, own, pad_id=PAD, is_cap=2.0, token_budget=40)
    assert same.tokens == sum(s.trained_tokens for s in samples)
    assert same.min == pytest.approx(1.0, abs=1e-4) and same.max == pytest.approx(1.0, abs=1e-4)
    assert same.truncated_share == 0.0
    # a sampler that gave every token 3x less probability: every ratio 3, all truncated at 2
    low = [
        dataclasses.replace(s, behaviour_logprobs=[v - math.log(3) for v in s.behaviour_logprobs])
        for s in own
    ]
    shifted = samples_ratio_stats(model, low, pad_id=PAD, is_cap=2.0)
    assert shifted.mean == pytest.approx(3.0, rel=1e-4) and shifted.truncated_share == 1.0
