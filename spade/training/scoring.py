"""Per-token log-probs and entropies of a causal LM, computed in chunks of the vocabulary.

Training scores only the sampled tokens, but a plain forward makes ``[tokens, vocabulary]``
logits for a whole micro-batch: at Qwen3's 151,936 entries that is 0.6 MB per token in fp32,
about 7 GB for 12k trained tokens, with several copies alive (logits, their exponentials, the
gradient). :class:`TokenScorer` instead runs the decoder to its last hidden states and projects
only the trained positions, ``chunk_tokens`` at a time: each chunk's logits give the log-prob of
its targets (``logit[target] - logsumexp(logits)``) and, on request, the entropy, and are
dropped before the next chunk. Under autograd a chunk runs in ``torch.utils.checkpoint``: the
backward pass recomputes its logits from the saved hidden states, so at most one chunk's
logits (and their gradient) are alive in either pass.

:class:`TokenScorer` is an ``nn.Module`` around the LM (its parameters are the LM's, not
copies): the engines wrap it, so DeepSpeed's forward (its autocast, ZeRO-3's parameter
gathering) runs around the whole computation. :func:`token_logprobs` takes a scorer, an engine
around one, or a bare LM (wrapped on the fly: the reference model, the behaviour check).

Shapes: ``B`` sequences of ``T`` positions; ``N`` trained positions (``loss_mask > 0``); ``V``
the vocabulary; ``H`` the hidden size.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = [
    "DEFAULT_CHUNK_TOKENS",
    "TokenScorer",
    "enable_activation_checkpointing",
    "token_logprobs",
]

Batch = dict[str, torch.Tensor]
DEFAULT_CHUNK_TOKENS = 1024


def _base_lm(model: nn.Module) -> Any:
    """The transformers causal LM inside ``model`` (a peft model's, with its adapters in place)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _split_supported(lm: Any) -> bool:
    """Whether ``lm``'s logits are exactly ``output_embeddings(decoder(...).last_hidden_state)``:
    a model that scales or caps its logits after the head (Gemma 2's soft-capping, Cohere's
    ``logit_scale``) is scored by its own forward instead."""
    config = getattr(lm, "config", None)
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return False
    return callable(getattr(lm, "get_decoder", None)) and lm.get_output_embeddings() is not None


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Recompute ``model``'s decoder layers in the backward pass (transformers' activation
    checkpointing, non-reentrant: it needs no input that requires grad, so frozen embeddings
    under LoRA are fine, and it nests with the chunks' own checkpoints)."""
    lm = _base_lm(model)
    if not getattr(lm, "supports_gradient_checkpointing", False):  # its name in transformers 5
        raise ValueError(f"{type(lm).__name__} does not support activation checkpointing")
    lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    lm.config.use_cache = False


class TokenScorer(nn.Module):
    """Log-probs ``[B, T]`` of a batch's target tokens under ``model`` (see the module
    docstring); ``chunk_tokens`` trained positions per projection chunk."""

    def __init__(self, model: nn.Module, chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> None:
        super().__init__()
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        self.model = model
        self.chunk_tokens = chunk_tokens
        lm = _base_lm(model)
        self._split = _split_supported(lm)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        loss_mask: torch.Tensor,
        target_ids: torch.Tensor,
        temperature: float = 1.0,
        entropy: bool = False,
        chunks: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``chunks``: how many projection chunks to run (None: as many as the trained
        positions need, at least 1); more than needed runs empty ones. ZeRO-3 gathers the
        head's weight at every call, a collective: every rank must run as many chunks."""
        keep = loss_mask > 0  # [B, T]
        hidden, head = self._hidden(input_ids, attention_mask, keep)  # [N, H] (or [N, V])
        targets = target_ids[keep]  # [N]
        size, n = self.chunk_tokens, hidden.shape[0]
        needed = max(-(-n // size), 1)
        if chunks is None:
            chunks = needed
        elif chunks < needed:
            raise ValueError(f"{n} trained positions need {needed} chunks of {size}, not {chunks}")
        if head is None:  # the model's own forward made every logit at once: one chunk
            size, chunks = max(n, 1), 1
        lps, ents = [], []
        grad = torch.is_grad_enabled() and hidden.requires_grad
        for at in range(0, chunks * size, size):
            part = (hidden[at : at + size], targets[at : at + size])
            args = (head, temperature, entropy, *part)
            if grad:  # the chunk's logits are recomputed in backward, not kept
                lp, ent = checkpoint(_score_chunk, *args, use_reentrant=False)
            else:
                lp, ent = _score_chunk(*args)
            lps.append(lp)
            ents.append(ent)
        picked = torch.cat(lps)  # [N] float32
        out = torch.zeros(keep.shape, dtype=picked.dtype, device=picked.device)
        out = out.masked_scatter(keep, picked)  # differentiable in the scattered values
        if not entropy:
            return out, None
        per_token = torch.cat([e for e in ents if e is not None])
        return out, torch.zeros_like(out).masked_scatter(keep, per_token)

    def _hidden(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: torch.Tensor
    ) -> tuple[torch.Tensor, nn.Module | None]:
        """The trained positions' last hidden states ``[N, H]`` and the head that projects
        them; for a model scored by its own forward, its ``[N, V]`` logits and None."""
        lm = _base_lm(self.model)
        if not self._split:
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                use_cache=False,
                logits_to_keep=keep,
            )
            return out.logits, None
        decoder = lm.get_decoder()
        out = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return out.last_hidden_state[keep], lm.get_output_embeddings()


def _score_chunk(
    head: nn.Module | None,
    temperature: float,
    entropy: bool,
    hidden: torch.Tensor,
    targets: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log p(target)`` ``[n]`` of ``n`` positions (``hidden`` ``[n, H]``, or already logits
    ``[n, V]`` when ``head`` is None) at ``temperature``, and their entropies (no gradient)."""
    logits = (head(hidden) if head is not None else hidden).float()  # [n, V]
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)  # [n]
    lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    if not entropy:
        return lp, None
    with torch.no_grad():  # a diagnostic: never trained on
        ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)
    return lp, ent


def token_logprobs(
    module: Any,
    batch: Batch,
    *,
    entropy: bool = False,
    temperature: float = 1.0,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    chunks: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``[B, T]`` of ``batch["target_ids"]`` and, optionally, the entropy ``[B, T]``.

    ``module``: a :class:`TokenScorer`, an engine's module around one (called as is), or a bare
    causal LM (scored through a :class:`TokenScorer` of ``chunk_tokens``). Only the trained
    positions (``loss_mask > 0``) are scored; values elsewhere are 0 and mean nothing (the loss
    and every metric mask them). Both are of ``logits / temperature``, the distribution a
    sampler at that temperature draws from; the entropy carries no gradient. ``chunks``: see
    :meth:`TokenScorer.forward` (several ZeRO-3 ranks must agree on it).
    """
    scorer = module if _is_scorer(module) else TokenScorer(module, chunk_tokens)
    return scorer(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        loss_mask=batch["loss_mask"],
        target_ids=batch["target_ids"],
        temperature=temperature,
        entropy=entropy,
        chunks=chunks,
    )


def _is_scorer(module: Any) -> bool:
    """A :class:`TokenScorer`, or an engine (DeepSpeed's) whose ``module`` is one."""
    inner = getattr(module, "module", None)
    return isinstance(module, TokenScorer) or isinstance(inner, TokenScorer)
