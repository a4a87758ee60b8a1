"""Token log-probs in chunks of the vocabulary projection, and activation checkpointing: the
same numbers and gradients as a plain forward, without a tokens x vocabulary tensor alive."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM

from spade.training.samples import TrainSample, collate
from spade.training.scoring import TokenScorer, enable_activation_checkpointing, token_logprobs

VOCAB, HIDDEN = 96, 32  # distinct from every other dimension: a [*, VOCAB] tensor is logits
PAD = 0


def _model(layers: int = 2, seed: int = 0) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=48,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.2,
        pad_token_id=PAD,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def _batch(lengths=(90, 61, 75), prompt: int = 7) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    samples = []
    for n in lengths:
        ids = torch.randint(1, VOCAB, (n,), generator=gen).tolist()
        mask = [0] * prompt + [1] * (n - prompt)
        samples.append(TrainSample(ids, mask, [0.0] * n, 0.0, "g", 1.0))
    return collate(samples, PAD)


def _reference(model: LlamaForCausalLM, batch, temperature: float) -> torch.Tensor:
    """log p(target) at every position from the model's own full logits, written out."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    lp = torch.log_softmax(logits.float() / temperature, dim=-1)
    picked = lp.gather(-1, batch["target_ids"].unsqueeze(-1)).squeeze(-1)
    return torch.where(batch["loss_mask"] > 0, picked, torch.zeros_like(picked))


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
def test_chunked_logprobs_and_gradients_equal_the_full_forward(chunk):
    batch = _batch()
    ref_model, model = _model(), _model()
    expected = _reference(ref_model, batch, temperature=0.7)
    (expected.sum() * 0.01).backward()
    got, entropy = token_logprobs(model, batch, temperature=0.7, chunk_tokens=chunk, entropy=True)
    (got.sum() * 0.01).backward()
    m = batch["loss_mask"] > 0
    assert torch.allclose(got[m], expected[m], atol=1e-5)
    assert entropy is not None and bool((entropy[m] > 0).all())
    grads = dict(ref_model.named_parameters())
    for name, p in model.named_parameters():
        want = grads[name].grad
        assert p.grad is not None and want is not None, name
        assert torch.allclose(p.grad, want, atol=1e-5 * float(want.abs().max()) + 1e-8), name


class _LargestLogits(TorchDispatchMode):
    """Records the most rows any op output of ``[rows, VOCAB]`` (or ``[..., VOCAB]``) had."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[-1] == VOCAB:
                self.rows = max(self.rows, t.numel() // VOCAB)
        return out


def test_no_logits_of_more_than_a_chunk_exist_in_forward_or_backward():
    batch = _batch()
    trained = int((batch["loss_mask"] > 0).sum())
    model = _model()
    watch = _LargestLogits()
    with watch:
        lp, _ = token_logprobs(model, batch, chunk_tokens=40, entropy=True)
        lp.sum().backward()
    # (the head's weight, transposed, is [HIDDEN, VOCAB]: 32 rows, fewer than a chunk's 40)
    assert trained > 200 and watch.rows == 40
    whole = _LargestLogits()
    with whole:  # the model's own forward: logits of every position at once
        _reference(_model(), batch, 1.0).sum().backward()
    assert whole.rows >= trained


def test_every_rank_can_run_as_many_chunks_as_the_busiest():
    batch = _batch(lengths=(20,))
    scorer = TokenScorer(_model(), chunk_tokens=4)  # 13 trained positions: 4 chunks needed
    alone, _ = scorer(**{k: batch[k] for k in ("input_ids", "attention_mask")},
                      loss_mask=batch["loss_mask"], target_ids=batch["target_ids"])  # fmt: skip
    padded, _ = token_logprobs(scorer, batch, chunks=9)  # five empty chunks after them
    assert torch.equal(alone, padded)
    with pytest.raises(ValueError, match="need 4 chunks of 4, not 3"):
        token_logprobs(scorer, batch, chunks=3)


def _saved_bytes(model: LlamaForCausalLM, batch) -> int:
    """Bytes of the tensors autograd keeps for the backward pass of one scoring forward."""
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp, _ = token_logprobs(model, batch, chunk_tokens=8)
    lp.sum().backward()
    return total


def test_activation_checkpointing_keeps_less_and_gives_the_same_gradient():
    batch = _batch(lengths=(200, 180))
    plain, ckpt = _model(layers=4), _model(layers=4)
    enable_activation_checkpointing(ckpt)
    kept_plain, kept_ckpt = _saved_bytes(plain, batch), _saved_bytes(ckpt, batch)
    print(f"\nsaved for backward: {kept_plain:,} bytes plain, {kept_ckpt:,} checkpointed")
    # a checkpointed layer keeps its input (tokens x hidden) and masks; a plain one its q, k, v,
    # attention, MLP and norm activations, many times that
    assert kept_ckpt * 4 < kept_plain
    grads = dict(plain.named_parameters())
    for name, p in ckpt.named_parameters():
        want = grads[name].grad
        assert p.grad is not None and want is not None, name
        assert torch.allclose(p.grad, want, atol=1e-5 * float(want.abs().max()) + 1e-8), name
