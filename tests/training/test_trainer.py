"""GRPOTrainer on the torch engine: learning signal, exact micro-batch accumulation,
checkpoint round trips and weight export (tiny random Llama on CPU)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from peft import PeftModel

from spade.config import TrainingConfig
from spade.errors import CheckpointError, ConfigError
from spade.inference.checkpoints import load_checkpoint
from spade.inference.models import load_state_into
from spade.training.samples import TrainSample
from spade.training.trainer import GRPOTrainer
from tests.training.tiny_task import (
    BAD,
    GOOD,
    GRAD_REL,
    LORA,
    PAD,
    PROMPT,
    flat_samples,
    learn,
    on_policy_step,
    sequence_logprob,
    skips_the_flat_update,
    task_samples,
    tiny_llama,
    varied_samples,
)


def test_full_fine_tune_learns_the_rewarded_completion():
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(lr=1e-2))
    good, bad = learn(trainer, steps=6)
    assert good > 0.5 and bad < -0.5


def test_lora_learns_and_trains_only_the_adapters():
    model = tiny_llama()
    base = dict(model.named_parameters())  # peft wraps these very parameters
    before = {name: p.detach().clone() for name, p in base.items()}
    trainer = GRPOTrainer(model, PAD, TrainingConfig(lr=2e-2, lora=LORA))
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    good, bad = learn(trainer, steps=6)
    assert good > 0.5 and bad < -0.5
    assert all(torch.equal(p, before[name]) for name, p in base.items())  # base weights frozen


def test_step_metrics_and_designer_learning_rate():
    trainer = GRPOTrainer(
        tiny_llama(), PAD, TrainingConfig(designer_lr=0.5, micro_batch_tokens=40), role="designer"
    )
    samples = varied_samples()
    m = trainer.step(samples)
    assert m.step == 1 and trainer.global_step == 1 and m.lr == 0.5
    assert m.tokens == sum(len(s) for s in samples)
    assert m.trained_tokens == sum(s.trained_tokens for s in samples)
    assert m.micro_batches > 1 and m.tokens_per_s > 0 and m.grad_norm > 0
    assert m.clip_fraction == 0.0 and m.ratio_mean == pytest.approx(1.0)  # pi_old = current weights
    assert 0 < m.entropy <= float(torch.log(torch.tensor(64.0)))
    assert set(m.to_dict()) >= {
        "loss",
        "kl",
        "clip_fraction",
        "grad_norm",
        "entropy",
        "tokens",
        "tokens_per_s",
        "micro_batches",
        "lr",
    }


# ------------------------------------------------------------------------------- precision


def _bf16_start() -> torch.nn.Module:
    return tiny_llama().to(torch.bfloat16)  # as model.dtype "auto" loads it on a GPU


def test_bf16_weights_learn_at_a_small_learning_rate():
    """AdamW on bf16 weights rounds a 1e-5 update away (|w| ~ 0.2: bf16 spacing ~ 1e-3); the
    engine keeps fp32 master weights, so the step lands as on an fp32 model from the same start."""
    start = {k: v.float() for k, v in _bf16_start().state_dict().items()}
    runs = {}
    for name, model in (("bf16", _bf16_start()), ("fp32", _bf16_start().float())):
        trainer = GRPOTrainer(model, PAD, TrainingConfig(lr=1e-5))
        for _ in range(3):
            trainer.step(task_samples(trainer.model))
        runs[name] = (trainer, trainer.export_weights())
    trainer, weights = runs["bf16"]
    dense = [k for k in weights if k.endswith("proj.weight") or k == "lm_head.weight"]
    moved = sum(int((weights[k] != start[k]).sum()) for k in dense)
    assert moved > 0.9 * sum(start[k].numel() for k in dense)  # was ~2% (only |w| < 5e-3)
    assert all(w.dtype == torch.float32 for w in weights.values())  # the masters are exported
    base = _bf16_start().float()
    rise = {
        name: sequence_logprob(t.model, PROMPT, GOOD) - sequence_logprob(base, PROMPT, GOOD)
        for name, (t, _) in runs.items()
    }
    print(
        f"\nlog p(GOOD) rise at lr 1e-5: bf16 start {rise['bf16']:+.4f}, fp32 {rise['fp32']:+.4f}"
    )
    assert rise["bf16"] > 0.05 and rise["bf16"] == pytest.approx(rise["fp32"], rel=0.2)
    serving = _bf16_start()  # an inference model in bf16 takes the fp32 export
    load_state_into(serving, weights)
    assert serving.lm_head.weight.dtype == torch.bfloat16
    torch.testing.assert_close(
        serving.lm_head.weight.float(), weights["lm_head.weight"].bfloat16().float()
    )


def test_lora_on_a_bf16_base_keeps_the_base_and_trains_fp32_adapters():
    trainer = GRPOTrainer(_bf16_start(), PAD, TrainingConfig(lr=1e-5, lora=LORA))
    params = dict(trainer.model.named_parameters())
    trainable = {n: p for n, p in params.items() if p.requires_grad}
    assert all(p.dtype == torch.float32 for p in trainable.values())  # peft's upcast adapters
    assert all(p.dtype == torch.bfloat16 for n, p in params.items() if n not in trainable)
    assert trainer.engine.compute_dtype is None  # nothing was cast: no autocast either
    before = {n: p.detach().clone() for n, p in trainable.items() if "lora_B" in n}
    trainer.step(task_samples(trainer.model))  # lora_B starts at 0, so only it moves at first
    assert all(not torch.equal(b, params[n]) for n, b in before.items())


# ------------------------------------------------------------------------ updates per batch


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_an_update_without_a_gradient_takes_no_optimizer_step(lora):
    """Every advantage 0 and no KL: the loss's gradient is exactly 0, and AdamW (here with
    weight decay too) would still move the weights by the last step's momentum."""
    config = TrainingConfig(lr=1e-2, weight_decay=0.1, lora=LORA if lora else {"enabled": False})
    skips_the_flat_update(GRPOTrainer(tiny_llama(), PAD, config))


def test_a_kl_term_or_one_update_with_signal_still_steps():
    """With a KL term the flat batch's loss has a gradient: it steps. With two updates per
    batch, only the mini-batch without signal skips its step."""
    kl = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(lr=1e-2, lora=LORA, kl_coef=0.01))
    kl.step(task_samples(kl.model))
    assert kl.step(flat_samples(kl.model)).optimizer_steps == 1
    two = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(lr=1e-2, updates_per_batch=2))
    m = two.step(task_samples(two.model, groups=2) + flat_samples(two.model, groups=2))
    assert [u.optimizer_steps for u in two.last_updates] == [1, 0]
    assert m.updates == 2 and m.optimizer_steps == 1 and two.global_step == 2


def test_several_updates_per_batch_clip_the_later_ones():
    """K = 4 optimizer steps on one batch: pi_old is taken once, so from the second update on
    the ratio moves off 1 and, with a tight clip, some tokens are clipped."""
    config = TrainingConfig(lr=1e-2, eps_low=0.01, eps_high=0.01, updates_per_batch=4)
    trainer = GRPOTrainer(tiny_llama(), PAD, config)
    samples = task_samples(trainer.model)
    m = trainer.step(samples)
    first, *later = trainer.last_updates
    assert len(trainer.last_updates) == 4 and trainer.global_step == 4
    assert [u.step for u in trainer.last_updates] == [1, 2, 3, 4]
    assert m.updates == 4 and m.step == 4 and m.samples == 8 == sum(u.samples for u in later) + 2
    assert first.clip_fraction == 0.0 and first.ratio_mean == pytest.approx(1.0, abs=1e-6)
    assert all(abs(u.ratio_mean - 1.0) > 1e-4 for u in later)
    assert any(u.clip_fraction > 0.0 for u in later)
    assert m.clip_fraction > 0.0 and m.trained_tokens == 8 * len(GOOD)
    print(
        f"\nclip fraction per update: {[round(u.clip_fraction, 3) for u in trainer.last_updates]}"
    )


def test_one_update_per_batch_is_one_on_policy_step():
    """K = 1 (the default): one AdamW step on the gradient of the whole batch's loss, pi_old =
    the current weights, written out by hand here.

    Checked in two parts, each to the precision its arithmetic guarantees: (1) the loss, the
    gradient and its norm are the hand-written loss's, up to float32 rounding (the trainer's
    forward also computes the entropy, in train mode: other kernels, other last bits); (2) the
    update is one AdamW step on that very gradient, clipped. Comparing the final weights of
    two runs instead cannot hold: AdamW's first step moves each weight by ~lr * g / (|g| + eps),
    so a 1e-9 rounding difference in a gradient near eps = 1e-8 moves a weight by a good part
    of lr, on one CPU and not another."""
    samples = varied_samples()
    config = TrainingConfig(lr=1e-2, grad_clip=0.5)
    trainer = GRPOTrainer(tiny_llama(), PAD, config)
    grads: list[torch.Tensor] = []
    finish = trainer.engine.finish_step

    def snapshot() -> float:  # the gradient the optimizer step is about to take, before clipping
        grads.extend(p.grad.clone() for p in trainer.engine.params)  # type: ignore[attr-defined]
        return finish()

    trainer.engine.finish_step = snapshot  # type: ignore[method-assign]
    m = trainer.step(samples)
    [only] = trainer.last_updates
    assert m.updates == 1 and m.step == 1 == trainer.global_step and m.micro_batches == 1
    assert (m.loss, m.grad_norm, m.clip_fraction) == (only.loss, only.grad_norm, 0.0)
    assert m.ratio_mean == pytest.approx(1.0) and m.samples == len(samples)

    # (1) the hand-written loss and gradient of one on-policy step
    loss, hand = on_policy_step(samples)
    assert list(hand) == [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    # the loss is a mean of terms A * w (|w| ~ 1): float32 sums of them err by ~1e-7 * mean|A|
    scale = sum(abs(s.advantage or 0.0) for s in samples) / len(samples)
    assert m.loss == pytest.approx(loss, abs=GRAD_REL * scale)
    for mine, theirs in zip(grads, hand.values(), strict=True):
        assert float((mine - theirs).abs().max()) <= GRAD_REL * float(theirs.abs().max())
    norm = float(torch.nn.utils.get_total_norm(list(hand.values())))
    assert norm > 0.5  # so the clip below is at work
    assert m.grad_norm == pytest.approx(norm, rel=GRAD_REL)

    # (2) the update: one AdamW step (no weight decay) on the trainer's gradient clipped at 0.5
    replay = tiny_llama()
    for p, g in zip(replay.parameters(), grads, strict=True):
        p.grad = g.clone()
    torch.nn.utils.clip_grad_norm_(list(replay.parameters()), 0.5)
    torch.optim.AdamW(replay.parameters(), lr=1e-2, weight_decay=0.0).step()
    got, start = trainer.export_weights(), tiny_llama().state_dict()
    for name, value in replay.state_dict().items():  # the same inputs: a few ulps of the update
        torch.testing.assert_close(got[name] - start[name], value - start[name],
                                   rtol=1e-5, atol=1e-5 * 1e-2)  # fmt: skip


def test_updates_are_capped_by_the_samples():
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(updates_per_batch=64))
    m = trainer.step(varied_samples(n=3))
    assert m.updates == 3 and trainer.global_step == 3
    assert [u.samples for u in trainer.last_updates] == [1, 1, 1]


def test_importance_weights_use_the_behaviour_logprobs():
    """Behaviour log-probs far below the current policy's: weights truncated at is_cap."""
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(is_cap=2.0))
    samples = task_samples(trainer.model)
    for s in samples:
        s.behaviour_logprobs = [
            lp - 5.0 if m else 0.0 for lp, m in zip(s.behaviour_logprobs, s.loss_mask, strict=True)
        ]
    m = trainer.step(samples)
    assert m.is_weight_mean == pytest.approx(2.0)
    # r = exp(5) on every trained token: k3 = e^5 - 1 - 5, every ratio outside [0.5, 2]
    assert m.mismatch_outside == 1.0
    assert m.mismatch_kl == pytest.approx(math.exp(5.0) - 6.0, rel=1e-3)


def test_a_sampler_on_the_trainers_weights_shows_no_mismatch():
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig())
    m = trainer.step(task_samples(trainer.model))  # behaviour = the same weights' log-probs
    assert m.mismatch_outside == 0.0 and 0.0 <= m.mismatch_kl < 1e-6


def test_the_trainer_scores_at_the_temperature_the_samples_were_drawn_at():
    """Samples drawn at 0.5 (their behaviour log-probs tempered, as the backends report them):
    a trainer at 0.5 agrees with the sampler, one at 1 sees a mismatch it should not."""
    base = tiny_llama()
    at_half = task_samples(base, temperature=0.5)
    matched = GRPOTrainer(copy.deepcopy(base), PAD, TrainingConfig(), temperature=0.5)
    assert matched.step(at_half).mismatch_kl < 1e-6
    unmatched = GRPOTrainer(copy.deepcopy(base), PAD, TrainingConfig())
    assert unmatched.step(task_samples(base, temperature=0.5)).mismatch_kl > 1e-3
    assert GRPOTrainer(tiny_llama(), PAD, TrainingConfig(), temperature=0.0).temperature == 1.0
    with pytest.raises(ValueError, match="temperature"):
        GRPOTrainer(tiny_llama(), PAD, TrainingConfig(), temperature=-1.0)


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "token_sum"])
def test_micro_batches_add_up_to_one_big_batch(aggregation):
    """The same step in one micro-batch or in several gives the same loss and gradient."""
    samples = varied_samples(n=10)
    grads, losses = [], []
    for budget in (10_000, 40):
        trainer = GRPOTrainer(
            tiny_llama(), PAD, TrainingConfig(aggregation=aggregation, micro_batch_tokens=budget)
        )
        seen: list[torch.Tensor] = []
        finish = trainer.engine.finish_step

        def snapshot(finish=finish, seen=seen, trainer=trainer) -> float:
            seen.extend(p.grad.clone() for p in trainer.engine.params)  # type: ignore[attr-defined]
            return finish()

        trainer.engine.finish_step = snapshot  # type: ignore[method-assign]
        m = trainer.step(samples)
        assert (m.micro_batches == 1) == (budget == 10_000)
        grads.append(seen)
        losses.append(m.loss)
    assert losses[0] == pytest.approx(losses[1], rel=1e-5, abs=1e-7)
    for one, many in zip(*grads, strict=True):  # float32 sums in another order: ~1e-7 relative
        assert float((one - many).abs().max()) <= 1e-5 * float(one.abs().max())


def test_kl_to_the_base_model_for_lora():
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(lr=2e-2, kl_coef=0.005, lora=LORA))
    first = trainer.step(task_samples(trainer.model))
    assert first.kl == pytest.approx(0.0, abs=1e-7)  # adapters start at zero: policy = base
    trainer.step(task_samples(trainer.model))
    assert trainer.step(task_samples(trainer.model)).kl > 0.0


def test_kl_with_a_reference_model_and_the_boundary_errors():
    with pytest.raises(ConfigError, match="ref_model"):
        GRPOTrainer(tiny_llama(), PAD, TrainingConfig(kl_coef=0.01))
    trainer = GRPOTrainer(
        tiny_llama(), PAD, TrainingConfig(lr=1e-2, kl_coef=0.01), ref_model=tiny_llama(seed=3)
    )
    assert trainer.step(task_samples(trainer.model)).kl > 0.0
    with pytest.raises(ValueError, match="advantage"):
        trainer.step([TrainSample([1, 2], [0, 1], [0.0, 0.0], 1.0, "g")])
    with pytest.raises(ValueError, match="no trained tokens"):
        trainer.step([TrainSample([1, 2], [0, 0], [0.0, 0.0], 1.0, "g", 0.0)])
    with pytest.raises(ValueError, match="role"):
        GRPOTrainer(tiny_llama(), PAD, TrainingConfig(), role="critic")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ checkpoints


@pytest.fixture(params=["local", "s3"])
def ckpt_root(request, tmp_path) -> tuple[str, dict | None]:
    """A checkpoint root on local disk or in a bucket on a real S3 endpoint (moto)."""
    if request.param == "local":
        return str(tmp_path / "ckpt"), None
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket.name}/ckpt", bucket.storage_options


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_resume_continues_bit_identically(ckpt_root, lora):
    config = TrainingConfig(lr=1e-2, micro_batch_tokens=40, lora=LORA if lora else {})
    samples = varied_samples()
    root, options = ckpt_root
    trainer = GRPOTrainer(tiny_llama(), PAD, config)
    trainer.step(samples)
    uri = trainer.save(root, storage_options=options)
    trainer.step(samples)
    trainer.step(samples)
    expected = trainer.export_weights(merged=False)

    # a fresh trainer: other full weights (or other adapter values), then resumed
    fresh = GRPOTrainer(
        tiny_llama(seed=0 if lora else 7), PAD, config.model_copy(update={"seed": 5})
    )
    info = fresh.resume(root, storage_options=options)
    assert info is not None and info.uri == uri and info.step == 1 and fresh.global_step == 1
    fresh.step(samples)
    fresh.step(samples)
    got = fresh.export_weights(merged=False)
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert fresh.global_step == 3


def test_resume_counts_optimizer_steps_with_several_updates_per_batch(tmp_path):
    config = TrainingConfig(lr=1e-2, updates_per_batch=2, eps_low=0.05, eps_high=0.05)
    samples = varied_samples()
    trainer = GRPOTrainer(tiny_llama(), PAD, config)
    trainer.step(samples)
    uri = trainer.save(str(tmp_path))
    trainer.step(samples)
    expected = trainer.export_weights()
    assert trainer.global_step == 4

    fresh = GRPOTrainer(tiny_llama(seed=7), PAD, config)
    info = fresh.resume(str(tmp_path))
    assert info is not None and info.uri == uri and info.step == 2 and fresh.global_step == 2
    fresh.step(samples)
    got = fresh.export_weights()
    assert all(torch.equal(got[k], expected[k]) for k in expected) and fresh.global_step == 4


def test_lora_checkpoint_holds_only_the_adapter_and_is_a_peft_folder(tmp_path):
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(lr=2e-2, lora=LORA))
    trainer.step(task_samples(trainer.model))
    uri = trainer.save(str(tmp_path / "ckpt"))
    loaded = load_checkpoint(uri)
    assert loaded.manifest["kind"] == "lora" and loaded.adapter_config is not None
    assert loaded.tensors and all(".lora_" in k for k in loaded.tensors)
    assert loaded.optimizer_state is not None and loaded.trainer_state["step"] == 1
    again = PeftModel.from_pretrained(tiny_llama(), uri)
    ids = torch.tensor([PROMPT + GOOD])
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).logits, trainer.model(input_ids=ids).logits)
    full = GRPOTrainer(tiny_llama(), PAD, TrainingConfig())
    with pytest.raises(CheckpointError, match="lora"):
        full.resume(str(tmp_path / "ckpt"))


def test_resume_of_an_empty_root_is_a_fresh_start(tmp_path):
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig())
    assert trainer.resume(str(tmp_path / "nothing-here")) is None and trainer.global_step == 0


# ---------------------------------------------------------------------------------- export


def _logits(model, ids=PROMPT + BAD):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits


def test_full_export_loads_as_the_inference_backend_loads_weights():
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(lr=1e-2))
    trainer.step(task_samples(trainer.model))
    weights = trainer.export_weights()
    serving = tiny_llama(seed=9)
    assert weights.keys() == serving.state_dict().keys()
    assert all(w.device.type == "cpu" for w in weights.values())
    load_state_into(serving, weights)  # what TransformersBackend.reload does with a state dict
    torch.testing.assert_close(_logits(serving), _logits(trainer.model))
    trainer.step(task_samples(trainer.model))  # the export is a copy, not a view
    assert not torch.equal(weights["lm_head.weight"], trainer.model.lm_head.weight.detach())


def test_lora_export_merged_and_as_an_adapter_folder(tmp_path):
    trainer = GRPOTrainer(tiny_llama(), PAD, TrainingConfig(lr=2e-2, lora=LORA))
    for _ in range(2):
        trainer.step(task_samples(trainer.model))
    merged = trainer.export_weights()
    serving = tiny_llama()
    assert merged.keys() == serving.state_dict().keys()
    load_state_into(serving, merged)
    torch.testing.assert_close(_logits(serving), _logits(trainer.model), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(_logits(tiny_llama()), _logits(trainer.model))  # it did train

    adapter = trainer.export_weights(merged=False)
    assert adapter and all(".lora_" in k for k in adapter)
    assert trainer.adapter_config()["r"] == 8
    trainer.save_pretrained(tmp_path / "adapter")
    again = PeftModel.from_pretrained(tiny_llama(), str(tmp_path / "adapter"))
    torch.testing.assert_close(_logits(again), _logits(trainer.model))


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_agent_designer_agent_continue_one_optimizer_each_at_its_own_rate(tmp_path, lora):
    """The round's chain alternates roles; each update loads the other role's checkpoint and
    continues its optimizer (moments, step) at its own learning rate: the same weights as one
    optimizer stepping three times with the rate switched in between."""
    config = TrainingConfig(
        lr=1e-2, designer_lr=3e-3, micro_batch_tokens=40, lora=LORA if lora else {}
    )
    samples = varied_samples()
    parent = None
    rates = []
    for i, role in enumerate(("agent", "designer", "agent")):
        base = tiny_llama(seed=0 if lora or i == 0 else 7 + i)  # later: overwritten by the load
        trainer = GRPOTrainer(base, PAD, config, role=role)
        if parent is not None:
            trainer.load_from(parent)
        rates.append(trainer.step(samples).lr)
        parent = trainer.save(str(tmp_path / f"{i}-{role}"), parent=parent)
    chained = trainer.export_weights(merged=False)
    state = load_checkpoint(parent).optimizer_state
    assert trainer.global_step == 3 and rates == [1e-2, 3e-3, 1e-2]
    assert state is not None and {int(s["step"]) for s in state["state"].values()} == {3}

    one = GRPOTrainer(tiny_llama(), PAD, config)
    for lr in (1e-2, 3e-3, 1e-2):
        one.engine.set_lr(lr)
        one.step(samples)
    expected = one.export_weights(merged=False)
    assert chained.keys() == expected.keys()
    assert all(torch.equal(chained[k], expected[k]) for k in expected)
