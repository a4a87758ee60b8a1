"""How far an update moved the policy (spade/training/shift.py and ``training.measure_shift``):
the sums worked by hand, and the trainer's figures against log-probs taken from the model
directly before and after a step (tiny random Llama on CPU)."""

from __future__ import annotations

import math

import pytest
import torch

from spade.config import TrainingConfig
from spade.training.shift import shift_metrics, shift_sums
from spade.training.trainer import GRPOTrainer
from tests.training.tiny_task import (
    BAD,
    GOOD,
    PAD,
    PROMPT,
    sequence_logprob,
    task_samples,
    tiny_llama,
)


def k3(gap: float) -> float:
    return math.exp(gap) - 1.0 - gap


def test_sums_by_hand():
    old = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0], [-1.0, -1.0, -1.0]])
    new = torch.tensor([[-0.5, -2.5, 7.0], [-1.5, -0.5, 5.0], [-2.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    sums = shift_sums(old, new, torch.tensor([2.0, -1.0, 0.0]), mask)
    # masked positions (the 7.0 and 5.0) count nowhere; the third sample (advantage 0) only in kl
    assert sums["tokens"] == 5 and sums["up_tokens"] == 2 and sums["down_tokens"] == 2
    assert sums["up"] == pytest.approx(0.5 - 0.5) and sums["down"] == pytest.approx(-1.0)
    assert sums["kl"] == pytest.approx(k3(0.5) + k3(-0.5) + k3(-1.0) + k3(0.0) + k3(-1.0))
    m = shift_metrics(sums)
    assert m["shift_kl"] == pytest.approx(sums["kl"] / 5)
    assert m["shift_up"] == pytest.approx(0.0) and m["shift_down"] == pytest.approx(-0.5)


def test_no_moved_tokens_read_zero_and_shapes_are_checked():
    zeros = dict.fromkeys(("tokens", "kl", "up_tokens", "up", "down_tokens", "down"), 0.0)
    assert shift_metrics(zeros) == {"shift_kl": 0.0, "shift_up": 0.0, "shift_down": 0.0}
    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="one shape"):
        shift_sums(lp, torch.zeros(2, 4), torch.zeros(2), lp)
    with pytest.raises(ValueError, match="advantages"):
        shift_sums(lp, lp, torch.zeros(3), lp)


@pytest.mark.parametrize("updates", [1, 2])
def test_the_trainer_reports_the_change_the_model_shows(updates):
    """Every GOOD sample has the same three tokens, so the mean change per token of the samples
    with a positive advantage is log p(GOOD)'s change over 3, read from the model itself."""
    config = TrainingConfig(lr=1e-2, measure_shift=True, updates_per_batch=updates)
    trainer = GRPOTrainer(tiny_llama(), PAD, config)
    good0 = sequence_logprob(trainer.model, PROMPT, GOOD)
    bad0 = sequence_logprob(trainer.model, PROMPT, BAD)
    trainer.step(task_samples(trainer.model))
    good = sequence_logprob(trainer.model, PROMPT, GOOD) - good0
    bad = sequence_logprob(trainer.model, PROMPT, BAD) - bad0
    shift = trainer.last_shift
    # float32 log-probs of ~4 nats by two code paths agree to ~1e-6
    assert shift["shift_up"] == pytest.approx(good / len(GOOD), abs=1e-4)
    assert shift["shift_down"] == pytest.approx(bad / len(BAD), abs=1e-4)
    assert shift["shift_up"] > 0.01 and shift["shift_down"] < -0.01  # it learned, visibly
    assert shift["shift_kl"] > 0.0


def test_a_step_that_barely_moves_reads_about_zero():
    """At lr 1e-12 (the least the config allows is > 0) Adam moves each weight by ~1e-12: what
    is left is the two passes' float32 noise."""
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(lr=1e-12, measure_shift=True))
    trainer.step(task_samples(trainer.model))
    shift = trainer.last_shift
    assert shift["shift_kl"] < 1e-10
    assert abs(shift["shift_up"]) < 1e-5 and abs(shift["shift_down"]) < 1e-5


def test_off_by_default():
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(lr=1e-2))
    trainer.step(task_samples(trainer.model))
    assert trainer.last_shift == {}
