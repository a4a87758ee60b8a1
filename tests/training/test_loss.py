"""The GRPO policy loss and its parts against hand-computed values (float64 throughout)."""

import math

import pytest
import torch
from torch.testing import assert_close

from spade.training.loss import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    LossOutput,
    aggregate,
    get_aggregation,
    get_kl_estimator,
    importance_weights,
    kl_k3,
    kl_penalty,
    policy_loss,
    sequence_mean,
    token_mean,
    token_sum,
)

F64 = torch.float64


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def scalar(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


# ----------------------------------------------------------------------------------------- KL

# lp = -1, -2, -0.5 and ref = -1.5, -1, -0.5, so d = ref - lp = -0.5, 1, 0
LP = [[-1.0, -2.0, -0.5]]
REF = [[-1.5, -1.0, -0.5]]


def test_kl_k1():
    # k1 = lp - ref = 0.5, -1, 0
    assert_close(kl_penalty(t(LP), t(REF), "k1"), t([[0.5, -1.0, 0.0]]))


def test_kl_k2():
    # k2 = 0.5 d^2 = 0.125, 0.5, 0
    assert_close(kl_penalty(t(LP), t(REF), "k2"), t([[0.125, 0.5, 0.0]]))


def test_kl_k3():
    # k3 = exp(d) - d - 1:
    #   d = -0.5: 0.6065306597 + 0.5 - 1 = 0.1065306597
    #   d = 1:    2.7182818285 - 1 - 1   = 0.7182818285
    #   d = 0:    1 - 0 - 1               = 0
    assert_close(
        kl_penalty(t(LP), t(REF), "k3"), t([[0.1065306597126334, 0.7182818284590451, 0.0]])
    )
    assert_close(kl_penalty(t(LP), t(REF)), kl_penalty(t(LP), t(REF), "k3"))  # the default


def test_k3_and_k2_are_non_negative():
    gen = torch.Generator().manual_seed(0)
    lp = -torch.rand(4, 7, generator=gen, dtype=F64) * 5
    ref = -torch.rand(4, 7, generator=gen, dtype=F64) * 5
    assert (kl_k3(lp, ref) >= 0).all()
    assert (kl_penalty(lp, ref, "k2") >= 0).all()


def test_kl_registry_and_errors():
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3"}
    assert get_kl_estimator("k3") is kl_k3
    with pytest.raises(ValueError, match=r"unknown KL estimator 'k4'; valid: k1, k2, k3"):
        kl_penalty(t(LP), t(REF), "k4")
    with pytest.raises(ValueError, match="shape"):
        kl_penalty(t(LP), t([[0.0, 0.0]]))


# ------------------------------------------------------------------------ importance weights


def test_importance_weights_truncated_at_cap():
    # old - behaviour = 0, log 1.5, log 3, -1 -> exp = 1, 1.5, 3, 0.3678794412
    # cap 2 -> 1, 1.5, 2, 0.3678794412; cap 1.2 -> 1, 1.2, 1.2, 0.3678794412
    old = t([[0.0, math.log(1.5), math.log(3.0), -1.0]])
    beh = torch.zeros(1, 4, dtype=F64)
    assert_close(importance_weights(old, beh, 2.0), t([[1.0, 1.5, 2.0, math.exp(-1.0)]]))
    assert_close(importance_weights(old, beh, 1.2), t([[1.0, 1.2, 1.2, 0.36787944117144233]]))
    # the same difference with a shifted behaviour
    assert_close(
        importance_weights(old - 2.0, beh - 2.0, 2.0), t([[1.0, 1.5, 2.0, math.exp(-1.0)]])
    )


def test_importance_weights_cap_zero_is_off():
    old = t([[0.0, 5.0, -5.0]])
    assert torch.equal(
        importance_weights(old, torch.zeros_like(old), 0.0), torch.ones(1, 3, dtype=F64)
    )


def test_importance_weights_are_detached():
    old = t([[0.0, 0.3]]).requires_grad_()
    beh = t([[0.1, 0.0]]).requires_grad_()
    w = importance_weights(old, beh, 2.0)
    assert not w.requires_grad
    assert not importance_weights(old, beh, 0.0).requires_grad


def test_importance_weights_errors():
    with pytest.raises(ValueError, match="cap"):
        importance_weights(t([[0.0]]), t([[0.0]]), -1.0)
    with pytest.raises(ValueError, match="shape"):
        importance_weights(t([[0.0]]), t([[0.0, 1.0]]), 2.0)


# --------------------------------------------------------------------------------- aggregate

VALUES = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
MASK = [[1, 1, 0], [1, 0, 0]]


def test_token_mean():
    # (1 + 2 + 4) / 3 tokens = 7/3
    assert_close(aggregate(t(VALUES), torch.tensor(MASK), "token_mean"), scalar(7 / 3))
    assert_close(token_mean(t(VALUES), torch.tensor(MASK)), scalar(7 / 3))


def test_sequence_mean():
    # per sequence: (1 + 2) / 2 = 1.5 and 4 / 1 = 4; mean (1.5 + 4) / 2 = 2.75
    assert_close(aggregate(t(VALUES), torch.tensor(MASK), "sequence_mean"), scalar(2.75))
    assert_close(sequence_mean(t(VALUES), torch.tensor(MASK)), scalar(2.75))


def test_token_sum():
    # (1 + 2 + 4) / B = 7 / 2 = 3.5
    assert_close(aggregate(t(VALUES), torch.tensor(MASK), "token_sum"), scalar(3.5))
    assert_close(token_sum(t(VALUES), torch.tensor(MASK)), scalar(3.5))


def test_sequence_mean_leaves_out_empty_sequences():
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    # token_mean: (1 + 2 + 3) / 3 = 2; sequence_mean: only row 0 counts -> 2; token_sum 6 / 2 = 3
    assert_close(aggregate(t(VALUES), mask, "token_mean"), scalar(2.0))
    assert_close(aggregate(t(VALUES), mask, "sequence_mean"), scalar(2.0))
    assert_close(aggregate(t(VALUES), mask, "token_sum"), scalar(3.0))


@pytest.mark.parametrize("mode", sorted(AGGREGATIONS))
def test_mask_dtypes_agree_and_masked_nan_does_not_leak(mode):
    values = t(VALUES)
    values[0, 2] = float("nan")
    values[1, 1] = float("inf")
    expected = aggregate(t(VALUES), torch.tensor(MASK), mode)
    for mask in (torch.tensor(MASK), torch.tensor(MASK, dtype=torch.bool), t(MASK)):
        assert_close(aggregate(values, mask, mode), expected)


@pytest.mark.parametrize("mode", sorted(AGGREGATIONS))
def test_empty_mask_gives_zero_with_a_gradient_path(mode):
    values = t(VALUES).requires_grad_()
    out = aggregate(values, torch.zeros(2, 3), mode)
    assert out.shape == () and out.item() == 0.0
    assert out.requires_grad
    out.backward()
    assert values.grad is not None and torch.equal(values.grad, torch.zeros(2, 3, dtype=F64))


def test_aggregation_gradients():
    # token_mean: d/dv = m / 3; sequence_mean: row 0 tokens 1/(2*2) = 0.25, row 1 1/(1*2) = 0.5;
    # token_sum: m / B = m / 2
    mask = torch.tensor(MASK)
    expected = {
        "token_mean": [[1 / 3, 1 / 3, 0.0], [1 / 3, 0.0, 0.0]],
        "sequence_mean": [[0.25, 0.25, 0.0], [0.5, 0.0, 0.0]],
        "token_sum": [[0.5, 0.5, 0.0], [0.5, 0.0, 0.0]],
    }
    for mode, grad in expected.items():
        values = t(VALUES).requires_grad_()
        aggregate(values, mask, mode).backward()
        assert_close(values.grad, t(grad))


def test_aggregation_registry_and_errors():
    assert set(AGGREGATIONS) == {"token_mean", "sequence_mean", "token_sum"}
    assert get_aggregation("token_sum") is token_sum
    with pytest.raises(
        ValueError, match=r"unknown aggregation 'mean'; valid: sequence_mean, token_mean, token_sum"
    ):
        aggregate(t(VALUES), torch.tensor(MASK), "mean")
    with pytest.raises(ValueError, match="same"):
        aggregate(t(VALUES), torch.ones(2, 2), "token_mean")


# ------------------------------------------------------------------------------- policy_loss


def on_policy(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random log-probs (B=2, T=3) with grad, and the same values as old log-probs: ratio 1."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(2, 3, generator=gen, dtype=F64) * 3
    return old.clone().requires_grad_(), old


ADV = [1.0, -3.0]
PMASK = [[1, 1, 1], [1, 1, 0]]


def test_ratio_one_gives_minus_mean_advantage_over_masked_tokens():
    lp, old = on_policy()
    out = policy_loss(lp, old, t(ADV), torch.tensor(PMASK))
    assert isinstance(out, LossOutput)
    # per-token loss -A: -1, -1, -1 | 3, 3, (masked); token_mean (-3 + 6) / 5 = 0.6
    # = -mean(A) over masked tokens = -(1 + 1 + 1 - 3 - 3) / 5
    assert_close(out.loss, scalar(0.6))
    out.loss.backward()
    # d loss / d lp = -A * ratio / 5 = -1/5 on row 0, 3/5 on row 1, 0 where masked
    assert_close(lp.grad, t([[-0.2, -0.2, -0.2], [0.6, 0.6, 0.0]]))
    m = out.metrics
    assert m["loss"] == pytest.approx(0.6)
    assert m["clip_fraction"] == m["clip_low_fraction"] == m["clip_high_fraction"] == 0.0
    assert m["ratio_mean"] == pytest.approx(1.0)
    assert m["is_weight_mean"] == pytest.approx(1.0)
    assert m["kl"] == 0.0
    assert m["tokens"] == 5.0
    assert set(m) == {
        "loss",
        "clip_fraction",
        "clip_low_fraction",
        "clip_high_fraction",
        "kl",
        "ratio_mean",
        "is_weight_mean",
        "mismatch_kl",
        "mismatch_outside",
        "tokens",
    }
    assert m["mismatch_kl"] == m["mismatch_outside"] == 0.0  # no sampler's log-probs given


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [
        # per-token -A: row 0: -1, -1, -1; row 1: 3, 3
        ("token_mean", 0.6),  # (-3 + 6) / 5
        ("sequence_mean", 1.0),  # (-1 + 3) / 2
        ("token_sum", 1.5),  # (-3 + 6) / B=2
    ],
)
def test_aggregation_is_selected_by_name(aggregation, expected):
    lp, old = on_policy()
    out = policy_loss(lp, old, t(ADV), torch.tensor(PMASK), aggregation=aggregation)
    assert_close(out.loss, scalar(expected))


def test_masked_tokens_contribute_nothing():
    lp, old = on_policy()
    mask = torch.tensor(PMASK)
    ref = old - 0.3
    beh = old + 0.2
    kwargs = {"behaviour_logprobs": beh, "ref_logprobs": ref, "kl_coef": 0.1}
    base = policy_loss(lp, old, t(ADV), mask, **kwargs)
    base.loss.backward()
    assert lp.grad is not None
    base_grad = lp.grad.clone()
    assert base_grad[1, 2] == 0.0

    for wild in (1e4, -1e4, float("inf"), float("-inf"), float("nan")):
        lp2 = lp.detach().clone()
        lp2[1, 2] = wild
        lp2.requires_grad_()
        old2, beh2, ref2 = old.clone(), beh.clone(), ref.clone()
        old2[1, 2] = -wild if not math.isnan(wild) else wild
        beh2[1, 2] = wild
        ref2[1, 2] = 3.0
        out = policy_loss(
            lp2, old2, t(ADV), mask, **{**kwargs, "behaviour_logprobs": beh2, "ref_logprobs": ref2}
        )
        out.loss.backward()
        assert_close(out.loss, base.loss)
        assert lp2.grad is not None
        assert_close(lp2.grad, base_grad)
        assert lp2.grad[1, 2] == 0.0
        assert out.metrics == pytest.approx(base.metrics)


def test_clipping_on_both_sides():
    # eps_low 0.2 -> [0.8, ...), eps_high 0.28 -> (..., 1.28]; old = 0, lp = log(ratio)
    # row 0, A = +1, ratios 1.5, 1.1, 0.5:
    #   1.5: min(1.5, 1.28) = 1.28 -> clipped (high), loss -1.28, grad 0
    #   1.1: in range           -> loss -1.1,  d/dlp = -A * ratio = -1.1
    #   0.5: min(0.5, 0.8) = 0.5 -> NOT clipped (pessimistic side), loss -0.5, d/dlp = -0.5
    # row 1, A = -1, ratios 0.5, 0.9, 1.5:
    #   0.5: min(-0.5, -0.8) = -0.8 -> clipped (low), loss 0.8, grad 0
    #   0.9: in range             -> loss 0.9, d/dlp = 0.9
    #   1.5: min(-1.5, -1.28) = -1.5 -> NOT clipped, loss 1.5, d/dlp = 1.5
    # token_mean: (-1.28 - 1.1 - 0.5 + 0.8 + 0.9 + 1.5) / 6 = 0.32 / 6
    ratios = t([[1.5, 1.1, 0.5], [0.5, 0.9, 1.5]])
    lp = ratios.log().requires_grad_()
    old = torch.zeros(2, 3, dtype=F64)
    out = policy_loss(lp, old, t([1.0, -1.0]), torch.ones(2, 3), eps_low=0.2, eps_high=0.28)
    assert_close(out.loss, scalar(0.32 / 6))
    out.loss.backward()
    assert_close(lp.grad, t([[0.0, -1.1, -0.5], [0.0, 0.9, 1.5]]) / 6)
    assert lp.grad[0, 0] == 0.0 and lp.grad[1, 0] == 0.0
    assert out.metrics["clip_fraction"] == pytest.approx(2 / 6)
    assert out.metrics["clip_high_fraction"] == pytest.approx(1 / 6)
    assert out.metrics["clip_low_fraction"] == pytest.approx(1 / 6)
    # (1.5 + 1.1 + 0.5 + 0.5 + 0.9 + 1.5) / 6 = 1
    assert out.metrics["ratio_mean"] == pytest.approx(1.0)


def test_clip_higher_is_asymmetric():
    # A = +1, ratio 1.25: inside 1 + eps_high = 1.28 -> not clipped, loss -1.25;
    # with a symmetric eps_high = 0.2 it is clipped at 1.2 -> loss -1.2, grad 0
    lp = torch.tensor([[math.log(1.25)]], dtype=F64, requires_grad=True)
    old = torch.zeros(1, 1, dtype=F64)
    adv = t([1.0])
    mask = torch.ones(1, 1)
    assert_close(policy_loss(lp, old, adv, mask).loss, scalar(-1.25))
    out = policy_loss(lp, old, adv, mask, eps_high=0.2)
    assert_close(out.loss, scalar(-1.2))
    assert out.metrics["clip_high_fraction"] == 1.0
    out.loss.backward()
    assert lp.grad is not None and lp.grad.item() == 0.0


def test_kl_term_adds_kl_coef_times_k3():
    # lp = old = -1, -2 (ratio 1), A = 0.5, ref = -1.5, -1 -> d = ref - lp = -0.5, 1
    # k3 = 0.1065306597, 0.7182818285; mean 0.4124062441
    # loss = mean(-0.5 + 0.1 * k3) = -0.5 + 0.1 * 0.4124062441 = -0.4587593756
    # d/dlp per token = (-A * ratio + kl_coef * (1 - exp(d))) / 2:
    #   (-0.5 + 0.1 * (1 - 0.6065306597)) / 2 = -0.2303265330
    #   (-0.5 + 0.1 * (1 - 2.7182818285)) / 2 = -0.3359140914
    lp = t([[-1.0, -2.0]]).requires_grad_()
    old = t([[-1.0, -2.0]])
    ref = t([[-1.5, -1.0]]).requires_grad_()
    mask = torch.ones(1, 2)
    out = policy_loss(lp, old, t([0.5]), mask, ref_logprobs=ref, kl_coef=0.1, kl_estimator="k3")
    assert_close(out.loss, scalar(-0.4587593755785604))
    assert out.metrics["kl"] == pytest.approx(0.41240624408583925)
    out.loss.backward()
    assert_close(lp.grad, t([[-0.23032653298563167, -0.33591409142295227]]))
    assert ref.grad is None

    # kl_coef 0: no penalty in the loss, the KL still reported
    off = policy_loss(lp, old, t([0.5]), mask, ref_logprobs=ref, kl_coef=0.0)
    assert_close(off.loss, scalar(-0.5))
    assert off.metrics["kl"] == pytest.approx(0.41240624408583925)

    # k1 instead: lp - ref = 0.5, -1 -> mean -0.25; loss -0.5 + 0.1 * -0.25 = -0.525
    k1 = policy_loss(lp, old, t([0.5]), mask, ref_logprobs=ref, kl_coef=0.1, kl_estimator="k1")
    assert_close(k1.loss, scalar(-0.525))


def test_importance_weights_scale_the_per_token_loss():
    # ratio 1, A = 1: per-token loss -1; old - behaviour = 0, log 1.5, log 3 -> weights 1, 1.5,
    # min(3, 2) = 2; loss mean(-1, -1.5, -2) = -1.5; d/dlp = -A * ratio * w / 3 = -w / 3
    lp = torch.zeros(1, 3, dtype=F64, requires_grad=True)
    old = torch.zeros(1, 3, dtype=F64)
    beh = t([[0.0, -math.log(1.5), -math.log(3.0)]]).requires_grad_()
    out = policy_loss(lp, old, t([1.0]), torch.ones(1, 3), behaviour_logprobs=beh, is_cap=2.0)
    assert_close(out.loss, scalar(-1.5))
    assert out.metrics["is_weight_mean"] == pytest.approx(1.5)
    out.loss.backward()
    assert_close(lp.grad, t([[-1 / 3, -0.5, -2 / 3]]))
    assert beh.grad is None
    # is_cap 0: correction off -> mean(-1, -1, -1) = -1
    off = policy_loss(lp, old, t([1.0]), torch.ones(1, 3), behaviour_logprobs=beh, is_cap=0.0)
    assert_close(off.loss, scalar(-1.0))
    assert off.metrics["is_weight_mean"] == 1.0


def test_mismatch_is_the_k3_kl_and_the_share_of_ratios_outside_the_band():
    """r = exp(train - behaviour) = 1, 1.5, 3 and (masked) 100: k3 = r - 1 - log r per token,
    so mean(0, 0.5 - log 1.5, 2 - log 3); outside [0.5, 2]: the 3 only, 1 of 3 trained tokens.
    A cap at 0 (correction off) still reports the mismatch: it is the sampler's, not the cap's."""
    from spade.training.loss import mismatch_metrics

    train = torch.zeros(1, 4, dtype=F64)
    beh = t([[0.0, -math.log(1.5), -math.log(3.0), -math.log(100.0)]])
    mask = torch.tensor([[True, True, True, False]])
    got = mismatch_metrics(train, beh, mask)
    want = (0.5 - math.log(1.5) + 2.0 - math.log(3.0)) / 3
    assert got["mismatch_kl"] == pytest.approx(want, rel=1e-6)
    assert got["mismatch_outside"] == pytest.approx(1 / 3)
    assert mismatch_metrics(train, train, mask) == {"mismatch_kl": 0.0, "mismatch_outside": 0.0}
    below = mismatch_metrics(train, t([[math.log(2.5), 0.0, 0.0, 0.0]]), mask)
    assert below["mismatch_outside"] == pytest.approx(1 / 3)  # r = 0.4 < 0.5
    out = policy_loss(train, train, t([1.0]), mask.double(), behaviour_logprobs=beh, is_cap=0.0)
    assert out.metrics["mismatch_kl"] == pytest.approx(want, rel=1e-6)


def test_gradients_flow_to_logprobs_only():
    gen = torch.Generator().manual_seed(1)

    def leaf() -> torch.Tensor:
        return (-torch.rand(2, 3, generator=gen, dtype=F64)).requires_grad_()

    lp, old, beh, ref = leaf(), leaf(), leaf(), leaf()
    adv = t(ADV).requires_grad_()
    out = policy_loss(
        lp, old, adv, torch.tensor(PMASK), behaviour_logprobs=beh, ref_logprobs=ref, kl_coef=0.05
    )
    out.loss.backward()
    assert lp.grad is not None and lp.grad.abs().sum() > 0
    for other in (old, beh, ref, adv):
        assert other.grad is None


def test_empty_mask_loss_is_zero_and_backward_works():
    lp, old = on_policy()
    out = policy_loss(lp, old, t(ADV), torch.zeros(2, 3, dtype=torch.bool))
    assert out.loss.item() == 0.0
    out.loss.backward()
    assert lp.grad is not None and torch.equal(lp.grad, torch.zeros(2, 3, dtype=F64))
    assert out.metrics["tokens"] == 0.0
    assert out.metrics["clip_fraction"] == 0.0


def test_float32_advantages_with_float64_logprobs():
    lp, old = on_policy()
    out = policy_loss(lp, old, torch.tensor(ADV, dtype=torch.float32), torch.tensor(PMASK))
    assert out.loss.dtype == F64
    assert_close(out.loss, scalar(0.6))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"aggregation": "mean"}, "unknown aggregation"),
        ({"kl_estimator": "k9"}, "unknown KL estimator"),
        ({"eps_low": 1.5}, "eps_low"),
        ({"eps_high": -0.1}, "eps_high"),
        ({"kl_coef": -1.0}, "kl_coef"),
        ({"behaviour_logprobs": torch.zeros(2, 2)}, "behaviour_logprobs"),
        ({"ref_logprobs": torch.zeros(3, 3)}, "ref_logprobs"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    lp, old = on_policy()
    with pytest.raises(ValueError, match=match):
        policy_loss(lp, old, t(ADV), torch.tensor(PMASK), **kwargs)


def test_bad_shapes_raise():
    lp, old = on_policy()
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(lp, old, t([1.0, 2.0, 3.0]), torch.tensor(PMASK))
    with pytest.raises(ValueError, match="mask"):
        policy_loss(lp, old, t(ADV), torch.ones(2, 2))
    with pytest.raises(ValueError, match="old_logprobs"):
        policy_loss(lp, old[:, :2], t(ADV), torch.tensor(PMASK))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        policy_loss(lp[0], old[0], t(ADV), torch.tensor(PMASK)[0])
