"""Copy masking: leave out of the loss the tokens a designer answer copied from its prompt.

Why: a splice answer rewrites one method of a parent shown whole in its prompt. If a kept
answer were mostly that method copied, a positive advantage spread over all its tokens would
raise the copied lines as much as the change that made it worth keeping, and copying pays the
lowest reward (``duplicate``). Masking the copied tokens trains only what the answer changed.
Measured (docs/results/designer_learnability.md): the 0.5B's kept splices copy almost nothing
of their prompt, its duplicates are new text that plays like the parent, and the mask changed
nothing measurable; it stays an option, off by default.

A completion token counts as *copied* when it lies inside a run of at least ``n`` consecutive
completion tokens that also occurs, contiguously, among the sample's context tokens (those its
loss mask leaves out: the prompt, the prefilled signature). Token ids, not text: no tokenizer is
needed, and a line written the same way in the parent tokenizes the same way in the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from spade.training.samples import TrainSample

__all__ = ["COPY_MASKS", "CopyMask", "copied_positions", "mask_copied"]

CopyMask = Literal["off", "positive", "all"]
COPY_MASKS: tuple[CopyMask, ...] = ("off", "positive", "all")
"""``off``: train every completion token; ``positive``: mask copied tokens in samples with a
positive advantage only (an answer worth more than its group trains on what it changed, one
worth less still pushes down all it wrote, copies included); ``all``: in every sample."""


def copied_positions(context: Sequence[int], tokens: Sequence[int], n: int) -> list[bool]:
    """Which of ``tokens`` lie in a run of ``>= n`` consecutive tokens found in ``context``.

    Shapes: ``context [C]``, ``tokens [T]`` -> ``[T]``. ``n >= 1``; runs shorter than ``n``
    (a shared ``self.`` or ``return``) do not count, so common fragments stay trained.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    grams = {tuple(context[i : i + n]) for i in range(len(context) - n + 1)}
    out = [False] * len(tokens)
    for i in range(len(tokens) - n + 1):
        if tuple(tokens[i : i + n]) in grams:
            out[i : i + n] = [True] * n
    return out


def _masked(sample: TrainSample, n: int) -> TrainSample:
    trained = [i for i, m in enumerate(sample.loss_mask) if m]
    context = [t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if not m]
    copied = copied_positions(context, [sample.input_ids[i] for i in trained], n)
    mask = list(sample.loss_mask)
    for i, c in zip(trained, copied, strict=True):
        if c:
            mask[i] = 0
    lps = [lp if m else 0.0 for lp, m in zip(sample.behaviour_logprobs, mask, strict=True)]
    return replace(sample, loss_mask=mask, behaviour_logprobs=lps)


def mask_copied(samples: Sequence[TrainSample], mode: CopyMask, n: int) -> list[TrainSample]:
    """``samples`` with copied completion tokens masked out of the loss as ``mode`` says
    (:data:`COPY_MASKS`); advantages must be assigned first (``positive`` reads their sign,
    and the advantage of a design is computed over all of its tokens, copies included)."""
    if mode not in COPY_MASKS:
        raise ValueError(f"copy mask {mode!r} is not one of {COPY_MASKS}")
    if mode == "off":
        return list(samples)
    if any(s.advantage is None for s in samples):
        raise ValueError("mask_copied needs the samples' advantages (assign_advantages first)")
    return [_masked(s, n) if mode == "all" or (s.advantage or 0.0) > 0 else s for s in samples]
