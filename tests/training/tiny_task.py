"""A tiny random-weight Llama and a synthetic GRPO task for the training tests.

The task: a prompt ``PROMPT`` and two completions, ``GOOD`` (reward 1) and ``BAD`` (reward 0),
played in several groups. GRPO must raise log p(GOOD | PROMPT) and lower log p(BAD | PROMPT).
No tokenizer: token ids are used directly. ``initializer_range`` is 0.2 (not Llama's 0.02) so
that the output layer's logits are not all near zero: LoRA on the attention projections only
moves the hidden states, and with a 0.02-scaled output layer that barely moves the logits.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from spade.training.loss import policy_loss
from spade.training.samples import TrainSample, assign_advantages, collate
from spade.training.scoring import token_logprobs
from spade.training.trainer import GRPOTrainer

VOCAB = 64
PAD = 0
PROMPT = [1, 5, 9, 13, 17]
GOOD = [20, 21, 22]
BAD = [30, 31, 32]
LORA = {"enabled": True, "rank": 8, "alpha": 16}  # on the default q/k/v/o projections
ADAM_EPS = 1e-8  # torch's AdamW default, the engines' too
GRAD_REL = 1e-5  # float32 gradients summed in another order agree to ~1e-7 of a tensor's max


def tiny_llama(seed: int = 0, *, hidden: int = 32, layers: int = 2) -> LlamaForCausalLM:
    """A 2-layer Llama (hidden 32, vocab 64, ~50k parameters) with seeded random weights."""
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.2,
        pad_token_id=PAD,
        bos_token_id=1,
        eos_token_id=2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.eval()


def sequence_logprob(model: torch.nn.Module, prompt: list[int], completion: list[int]) -> float:
    """log p(completion | prompt), summed over its tokens, computed prefix by prefix."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    return sum(float(lp[len(prompt) - 1 + i, tok]) for i, tok in enumerate(completion))


def own_logprobs(
    model: torch.nn.Module, ids: list[int], start: int, temperature: float = 1.0
) -> list[float]:
    """Per-token log-probs of ``ids`` under ``model`` (0.0 before ``start``) at ``temperature``:
    behaviour log-probs as an inference engine running these weights would report them."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return [0.0] * start + [float(lp[t - 1, ids[t]]) for t in range(start, len(ids))]


def task_samples(
    model: torch.nn.Module,
    groups: int = 4,
    temperature: float = 1.0,
    rewards: tuple[float, float] = (1.0, 0.0),
) -> list[TrainSample]:
    """``groups`` groups of (GOOD, ``rewards[0]``) and (BAD, ``rewards[1]``), advantages
    assigned; their behaviour log-probs are ``model``'s at ``temperature``."""
    samples = []
    for g in range(groups):
        for completion, reward in zip((GOOD, BAD), rewards, strict=True):
            ids = PROMPT + completion
            mask = [0] * len(PROMPT) + [1] * len(completion)
            beh = own_logprobs(model, ids, len(PROMPT), temperature)
            samples.append(TrainSample(ids, mask, beh, reward, f"env-{g}"))
    assign_advantages(samples, "zscore")
    return samples


def flat_samples(model: torch.nn.Module, groups: int = 2) -> list[TrainSample]:
    """:func:`task_samples` where GOOD and BAD scored alike (0.5 each): every advantage is 0,
    so without a KL term the loss has no gradient."""
    samples = task_samples(model, groups, rewards=(0.5, 0.5))
    assert all(s.advantage == 0.0 for s in samples)
    return samples


def snapshot(state: object) -> object:
    """A copy of a (nested) optimizer state, each tensor detached and cloned (DeepSpeed's hold
    tensors that are not graph leaves, which ``copy.deepcopy`` refuses)."""
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, dict):
        return {k: snapshot(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(snapshot(v) for v in state)
    return copy.deepcopy(state)


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """``a`` and ``b`` hold the same values, tensors bit for bit (nested dicts and lists)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def skips_the_flat_update(trainer: GRPOTrainer) -> None:
    """One step on the task (momentum for AdamW to replay), one on :func:`flat_samples`: the
    flat one leaves the weights and the optimizer state bit for bit as they were, counts as an
    update and says it took no optimizer step; the next step with a gradient steps again."""
    trainer.step(task_samples(trainer.model))
    weights = trainer.export_weights()
    optimizer = snapshot(trainer.engine.optimizer_state())
    flat = trainer.step(flat_samples(trainer.model))
    assert flat.optimizer_steps == 0 and flat.grad_norm == 0.0 and flat.loss == 0.0
    assert flat.step == trainer.global_step == 2 and flat.trained_tokens == 4 * len(GOOD)
    after = trainer.export_weights()
    assert after.keys() == weights.keys()
    assert [k for k in weights if not torch.equal(after[k], weights[k])] == []
    assert_same(trainer.engine.optimizer_state(), optimizer, "optimizer")
    moved = trainer.step(task_samples(trainer.model))
    assert moved.optimizer_steps == 1 and trainer.global_step == 3
    assert any(not torch.equal(v, after[k]) for k, v in trainer.export_weights().items())


def varied_samples(seed: int = 0, n: int = 8) -> list[TrainSample]:
    """``n`` samples of different lengths (7..18 tokens) in two groups, advantages assigned;
    behaviour log-probs are made up (close to uniform) so they need no model."""
    gen = torch.Generator().manual_seed(seed)
    samples = []
    for i in range(n):
        length = 7 + int(torch.randint(0, 12, (1,), generator=gen))
        prompt = 3 + i % 3
        ids = torch.randint(3, VOCAB, (length,), generator=gen).tolist()
        mask = [0] * prompt + [1] * (length - prompt)
        beh = [0.0] * prompt + [-4.1 - 0.01 * j for j in range(length - prompt)]
        reward = float(torch.rand((1,), generator=gen))
        samples.append(TrainSample(ids, mask, beh, reward, f"env-{i % 2}"))
    assign_advantages(samples, "zscore")
    return samples


def learn(trainer: GRPOTrainer, steps: int) -> tuple[float, float]:
    """Train on the task for ``steps`` steps; the change of log p(GOOD) and log p(BAD) (nats)."""
    good0 = sequence_logprob(trainer.model, PROMPT, GOOD)
    bad0 = sequence_logprob(trainer.model, PROMPT, BAD)
    for _ in range(steps):
        metrics = trainer.step(task_samples(trainer.model))
        assert metrics.trained_tokens == 8 * len(GOOD) and metrics.samples == 8
    good = sequence_logprob(trainer.model, PROMPT, GOOD) - good0
    bad = sequence_logprob(trainer.model, PROMPT, BAD) - bad0
    print(
        f"\nlearning margin ({trainer.engine.name}, {trainer.kind}): {good:+.2f} good, {bad:+.2f} bad"
    )
    return good, bad


def on_policy_step(samples: list[TrainSample]) -> tuple[float, dict[str, torch.Tensor]]:
    """One on-policy GRPO step on ``samples`` written out by hand: the loss (token mean, pi_old
    = the current weights) of ``tiny_llama()`` and its gradient by parameter name."""
    model = tiny_llama()
    batch = collate(samples, PAD)
    lp, _ = token_logprobs(model, batch)
    out = policy_loss(lp, lp.detach(), batch["advantages"], batch["loss_mask"],
                      behaviour_logprobs=batch["behaviour_logprobs"])  # fmt: skip
    out.loss.backward()
    return out.loss.item(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def adam_first_step_slack(grad: torch.Tensor, lr: float) -> torch.Tensor:
    """Per element: how far AdamW's first step, ``lr * g / (|g| + eps)``, can move when ``g`` is
    only known to within ``GRAD_REL`` of the tensor's largest element (another summation order,
    another CPU). The step's slope, ``eps / (|g| + eps)^2``, is steepest where |g| is smallest,
    so a rounding-sized difference in a near-zero gradient moves a weight by up to 2 lr: such
    weights cannot be compared tighter, the others can, to a tiny fraction of lr."""
    delta = GRAD_REL * grad.abs().max()
    nearest = (grad.abs() - delta).clamp_min(0.0)
    return (lr * delta * ADAM_EPS / (nearest + ADAM_EPS) ** 2).clamp_max(2 * lr)
