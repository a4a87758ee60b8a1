"""GRPO updates of the agent or the designer (docs/architecture.md §2.9).

:meth:`GRPOTrainer.step` takes samples whose advantages are set
(:func:`spade.training.samples.assign_advantages`) and takes ``updates_per_batch`` (``K``)
optimizer steps on them:

1. splits them, in order, into ``K`` mini-batches of near-equal sample counts (samples of a
   group are usually adjacent, so a mini-batch mostly holds whole groups; the advantages were
   computed over the whole batch already), each packed into micro-batches of at most
   ``micro_batch_tokens`` padded tokens;
2. with ``K > 1``, computes ``old_logprobs`` once for all of them, without gradient, with the
   current weights (pi_old, before the first update; eval mode, so no dropout; with ``K = 1``
   pi_old is the update's own forward, detached: no extra pass) and, with a KL penalty, the
   reference log-probs (the ``ref_model``, or for LoRA the base model with the adapters off);
3. per mini-batch, per micro-batch: forward, the log-prob of each target token at the shifted
   position (see :mod:`spade.training.samples`) and its entropy,
   :func:`~spade.training.loss.policy_loss` (clipped ratio against pi_old, truncated importance
   weights ``min(exp(old - behaviour), is_cap)`` against the sampler's log-probs, optional KL),
   and ``backward`` of the loss scaled by the micro-batch's share of its mini-batch;
4. per mini-batch: clips the gradient norm and takes one optimizer step.

With ``K = 1`` the one update is on-policy (ratio 1, nothing clipped); with ``K > 1`` the later
updates see the weights the earlier ones moved, and the clipped ratio bounds how far they go
(PPO's several updates per rollout batch). An update whose loss has no gradient (every
advantage 0, no KL term: a batch of flat groups) runs its forward passes and skips the backward
and the optimizer step, which would only replay AdamW's momentum (:meth:`_has_gradient`).
``global_step`` counts updates, skipped ones too (checkpoints are named by it).

Shares. A micro-batch's loss is aggregated over its own tokens, so it is scaled by
``d_i / D``, where ``d_i`` is what its aggregation divides by and ``D`` the same over the whole
mini-batch (all ranks): trained tokens for ``token_mean``, sequences with a trained token for
``sequence_mean``, sequences for ``token_sum``. The summed gradient is then exactly that of the
whole mini-batch in one go for every aggregation. DeepSpeed averages gradients over its ``W``
ranks, so there the scale is ``W * d_i / D``.

Precision. Forward passes run inside ``engine.autocast()``: the torch engine keeps fp32
trainable weights and computes in bf16 when the model came in bf16 (see
:class:`~spade.training.engines.TorchEngine`).

Several DeepSpeed ranks: each rank passes its own shard of the samples (advantages computed
on the whole batch first); every rank must call :meth:`step`, :meth:`save`, :meth:`resume` and
:meth:`export_weights` together (they are collective).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from spade.config import TrainingConfig
from spade.errors import ConfigError
from spade.inference.adapters import is_peft
from spade.training.engines import make_engine
from spade.training.loss import LossOutput, policy_loss
from spade.training.samples import Batch, TrainSample, collate, micro_batches
from spade.training.scoring import enable_activation_checkpointing, token_logprobs
from spade.training.shift import SUM_KEYS, shift_metrics, shift_sums
from spade.training.step_metrics import StepMetrics, combine
from spade.training.trainer_state import TrainerState
from spade.training.weights import wrap_lora

__all__ = ["GRPOTrainer", "StepMetrics"]

log = logging.getLogger(__name__)
_MEANS = ("kl", "clip_fraction", "ratio_mean", "is_weight_mean", "mismatch_kl", "mismatch_outside")
"""The loss's metrics that are means over the trained tokens (summed token-weighted)."""
_TOKEN_METRICS = (*_MEANS, "entropy")


@dataclass(frozen=True)
class _Plan:
    """One optimizer step's micro-batches (padded to the ranks' common count) and shares."""

    batches: list[Batch]
    chunks: list[int]  # projection chunks of each micro-batch (the ranks' most: see scoring)
    denoms: list[float]  # what each micro-batch's aggregation divides by (0: padding)
    total: float  # the sum of denoms over all ranks
    samples: int  # this rank's samples in it


class GRPOTrainer(TrainerState):
    """GRPO on ``model`` (a causal LM): full fine-tune, or LoRA with ``config.lora.enabled``.

    The torch engine trains the model where it is (move it to the GPU first); DeepSpeed moves it
    to its rank's device.

    Args:
        model: a transformers causal LM (or a peft model when LoRA is on). With LoRA the
            adapters are injected into it in place; only they train.
        tokenizer_pad_id: the id padding is filled with (any valid id: padding is masked).
        config: the training section; ``config.engine`` picks torch or DeepSpeed.
        role: ``"agent"`` (``config.lr``) or ``"designer"`` (``config.designer_lr``).
        ref_model: the reference policy of the KL penalty, moved to the training device. Without
            it a LoRA model uses its base (adapters off); a full fine-tune with ``kl_coef > 0``
            needs one.
        temperature: the temperature the role's samples were drawn at: every log-prob (the
            policy's, pi_old's, the reference's) is of ``logits / temperature``, the
            distribution the behaviour log-probs are of (the backends report them tempered).
            0 (greedy) counts as 1.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer_pad_id: int,
        config: TrainingConfig,
        *,
        role: Literal["agent", "designer"] = "agent",
        ref_model: nn.Module | None = None,
        temperature: float = 1.0,
    ) -> None:
        if role not in ("agent", "designer"):
            raise ValueError(f"role must be 'agent' or 'designer', not {role!r}")
        if not temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.temperature = float(temperature) if temperature > 0 else 1.0
        self.config, self.role, self.pad_id = config, role, int(tokenizer_pad_id)
        self.lora = config.lora.enabled
        if self.lora:
            model = wrap_lora(model, config.lora, seed=config.seed)
        elif is_peft(model):
            raise ConfigError("the model has adapters but training.lora.enabled is false")
        if config.kl_coef > 0 and ref_model is None and not self.lora:
            raise ConfigError("training.kl_coef > 0 needs a ref_model for a full fine-tune")
        if config.activation_checkpointing:
            enable_activation_checkpointing(model)
        self.model = model
        self.lr = config.lr if role == "agent" else config.designer_lr
        self.engine = make_engine(model, config, self.lr)
        self.ref_model = ref_model
        if ref_model is not None:
            ref_model.to(self.engine.device).eval().requires_grad_(False)
        self.global_step = 0  # updates taken (an update without a gradient counts)
        self.last_updates: list[StepMetrics] = []  # each update of the latest step()
        self.last_shift: dict[str, float] = {}  # the latest step()'s, with measure_shift

    # ---------------------------------------------------------------------------------- step

    def step(self, samples: Sequence[TrainSample]) -> StepMetrics:
        """``updates_per_batch`` optimizer steps on ``samples`` (this rank's shard); see the
        module docstring. Returns the batch's metrics; each update's are in
        :attr:`last_updates`; with ``measure_shift``, how far they moved the policy is in
        :attr:`last_shift` (:mod:`spade.training.shift`)."""
        started = time.perf_counter()
        if any(s.advantage is None for s in samples):
            raise ValueError("every sample needs an advantage: call assign_advantages first")
        plans = [self._plan(chunk) for chunk in self._split(samples)]
        old, ref = self._reference_logprobs(
            [(b, c) for plan in plans for b, c in zip(plan.batches, plan.chunks, strict=True)],
            on_policy=len(plans) == 1,
        )
        updates, at = [], 0
        kept: list[torch.Tensor] | None = [] if self.config.measure_shift else None
        for plan in plans:  # pi_old stays the weights before the first update
            n = len(plan.batches)
            old_part = old[at : at + n] if old is not None else None
            updates.append(self._update(plan, old_part, ref[at : at + n] if ref else None, kept))
            at += n
        self.last_updates = updates
        self.last_shift = self._shift(plans, kept) if kept is not None else {}
        return self._summary(updates, started)

    def _split(self, samples: Sequence[TrainSample]) -> list[Sequence[TrainSample]]:
        """``updates_per_batch`` contiguous mini-batches of near-equal sample counts (fewer when
        some rank has fewer samples than that: every rank must take as many optimizer steps)."""
        k = self.config.updates_per_batch
        if k > 1:
            fillable = min(k, len(samples)) if samples else k  # an empty shard only pads
            k = max(-self.engine.max_across_ranks(-fillable), 1)
        size, extra = divmod(len(samples), k)
        chunks, at = [], 0
        for j in range(k):
            n = size + (1 if j < extra else 0)
            chunks.append(samples[at : at + n])
            at += n
        return chunks

    def _plan(self, samples: Sequence[TrainSample]) -> _Plan:
        """One optimizer step's micro-batches, on the device, and their shares' parts."""
        groups = micro_batches(samples, self.config.micro_batch_tokens)
        batches = [self._to_device(collate([samples[i] for i in g], self.pad_id)) for g in groups]
        denoms = [self._denominator(b) for b in batches]
        # ZeRO-2/3 reduce inside backward: every rank must run as many (padding: weight 0)
        n_micro = self.engine.max_across_ranks(max(len(batches), 1))
        filler = batches[-1] if batches else self._to_device(self._empty_batch())
        batches += [filler] * (n_micro - len(batches))
        denoms += [0.0] * (n_micro - len(denoms))
        # ZeRO-3 gathers the output head at each chunk: the ranks run as many per micro-batch
        size = self.config.logprob_chunk_tokens
        need = [max(-(-int((b["loss_mask"] > 0).sum().item()) // size), 1) for b in batches]
        chunks = self.engine.max_each_across_ranks(need)
        total = self.engine.sum_across_ranks([sum(denoms)])[0]
        if total <= 0:
            raise ValueError("the step has no trained tokens (empty batch or all-zero masks)")
        return _Plan(batches, chunks, denoms, total, len(samples))

    def _update(
        self,
        plan: _Plan,
        old: list[torch.Tensor] | None,
        ref: list[torch.Tensor] | None,
        kept: list[torch.Tensor] | None = None,
    ) -> StepMetrics:
        """Forward and backward over the plan's micro-batches, then one optimizer step.

        ``old`` None: one on-policy update, pi_old is the forward's own log-probs, detached.
        ``kept``: each micro-batch's pi_old is appended to it (for :meth:`_shift`)."""
        started = time.perf_counter()
        n_micro = len(plan.batches)
        moves = self._has_gradient(plan)
        self.engine.module.train()
        if moves:
            self.engine.begin_step(n_micro)
        sums = dict.fromkeys(("loss", "trained", "tokens", *_TOKEN_METRICS), 0.0)
        sums["samples"] = float(plan.samples)
        for i, batch in enumerate(plan.batches):
            share = plan.denoms[i] / plan.total
            with self.engine.autocast(), torch.set_grad_enabled(moves):
                lp, entropy = token_logprobs(
                    self.engine.module,
                    batch,
                    entropy=True,
                    temperature=self.temperature,
                    chunks=plan.chunks[i],
                )
            pi_old = lp.detach() if old is None else old[i]
            if kept is not None:
                kept.append(pi_old)
            out = self._loss(lp, pi_old, ref[i] if ref is not None else None, batch)
            if moves:
                self.engine.backward(out.loss * (share * self.engine.world_size))
            if share > 0.0:  # else a padding micro-batch: it only keeps the ranks in step
                self._accumulate(sums, out.metrics, share, batch, entropy)
        grad_norm = self.engine.finish_step() if moves else 0.0
        self.global_step += 1
        return self._metrics(sums, grad_norm, n_micro, started, stepped=moves)

    def _has_gradient(self, plan: _Plan) -> bool:
        """Whether the update's loss can have a gradient (collective: the ranks agree).

        Without a KL term, a loss whose every trained sample has advantage 0 is 0 for any
        weights (the clipped surrogate is a multiple of the advantage), so its gradient is
        exactly 0. AdamW would still step: its momentum moves the weights about 2/3 as far as
        the step before, in that step's direction (and weight decay shrinks them), replaying the
        last batch with no new data (measured: docs/training.md). Such an update runs its
        forward passes for the metrics and skips the backward and the optimizer step, so the
        weights and the optimizer state stay as they were."""
        if self.config.kl_coef > 0:
            return True
        signal = 0.0
        for batch, denom in zip(plan.batches, plan.denoms, strict=True):
            if denom > 0:  # a padding micro-batch repeats a real one at weight 0
                trained = (batch["loss_mask"] > 0).any(dim=1)
                signal += float(((batch["advantages"] != 0) & trained).sum().item())
        return self.engine.sum_across_ranks([signal])[0] > 0

    def _shift(self, plans: list[_Plan], olds: list[torch.Tensor]) -> dict[str, float]:
        """The batch scored again with the updated weights, against pi_old (``olds``, one per
        micro-batch of ``plans`` in order): :func:`spade.training.shift.shift_metrics`, summed
        over the ranks (collective: every rank scores as many micro-batches)."""
        module, sums, t = self.engine.module, dict.fromkeys(SUM_KEYS, 0.0), self.temperature
        micro = [m for p in plans for m in zip(p.batches, p.chunks, p.denoms, strict=True)]
        module.eval()  # as pi_old's own pass (no dropout noise)
        with torch.no_grad(), self.engine.autocast():
            for (batch, chunks, denom), old in zip(micro, olds, strict=True):
                new = token_logprobs(module, batch, temperature=t, chunks=chunks)[0]
                if denom > 0:  # else a padding micro-batch, scored to keep the ranks in step
                    part = shift_sums(old, new, batch["advantages"], batch["loss_mask"])
                    sums = {k: sums[k] + part[k] for k in SUM_KEYS}
        totals = self.engine.sum_across_ranks([sums[k] for k in SUM_KEYS])
        return shift_metrics(dict(zip(SUM_KEYS, totals, strict=True)))

    def _summary(self, updates: list[StepMetrics], started: float) -> StepMetrics:
        """The batch's metrics (see :class:`StepMetrics`), timed from ``started``."""
        return combine(updates, time.perf_counter() - started)

    def _loss(
        self, lp: torch.Tensor, old: torch.Tensor, ref: torch.Tensor | None, batch: Batch
    ) -> LossOutput:
        c = self.config
        return policy_loss(
            lp,
            old,
            batch["advantages"],
            batch["loss_mask"],
            eps_low=c.eps_low,
            eps_high=c.eps_high,
            behaviour_logprobs=batch["behaviour_logprobs"],
            is_cap=c.is_cap,
            ref_logprobs=ref,
            kl_coef=c.kl_coef,
            kl_estimator=c.kl_estimator,
            aggregation=c.aggregation,
        )

    def _reference_logprobs(
        self, batches: list[tuple[Batch, int]], *, on_policy: bool
    ) -> tuple[list[torch.Tensor] | None, list[torch.Tensor] | None]:
        """pi_old's log-probs (current weights) and the reference's, without gradient.

        ``on_policy`` (one update per batch): pi_old is the current policy itself, so the
        update's own forward gives it (None here) and no extra forward pass is paid for (a
        third of a step's compute); the ratio is exactly 1. Several updates need pi_old fixed
        before the first."""
        module = self.engine.module
        module.eval()  # pi_old without dropout noise
        use_ref = self.ref_model is not None or (self.lora and self.config.kl_coef > 0)
        t, size = self.temperature, self.config.logprob_chunk_tokens
        with torch.no_grad(), self.engine.autocast():
            old = None
            if not on_policy:
                old = [token_logprobs(module, b, temperature=t, chunks=c)[0] for b, c in batches]
            if not use_ref:
                return old, None
            if self.ref_model is not None:  # not sharded: no chunk count to agree on
                ref_model = self.ref_model
                return old, [
                    token_logprobs(ref_model, b, temperature=t, chunk_tokens=size)[0]
                    for b, _ in batches
                ]
            with self.model.disable_adapter():  # type: ignore[operator]
                return old, [
                    token_logprobs(module, b, temperature=t, chunks=c)[0] for b, c in batches
                ]

    def _denominator(self, batch: Batch) -> float:
        """What this micro-batch's aggregation divides by (see the module docstring)."""
        mask = batch["loss_mask"]
        if self.config.aggregation == "token_mean":
            return float(mask.sum().item())
        if self.config.aggregation == "sequence_mean":
            return float((mask.sum(dim=1) > 0).sum().item())
        return float(mask.shape[0])  # token_sum divides by the number of sequences

    @staticmethod
    def _accumulate(
        sums: dict[str, float],
        metrics: dict[str, float],
        share: float,
        batch: Batch,
        entropy: torch.Tensor | None,
    ) -> None:
        mask = batch["loss_mask"]
        trained = float(mask.sum().item())
        sums["loss"] += metrics["loss"] * share
        sums["trained"] += trained
        sums["tokens"] += float(batch["attention_mask"].sum().item())
        for key in _MEANS:
            sums[key] += metrics[key] * trained  # token means -> token-weighted sums
        if entropy is not None:
            sums["entropy"] += float((entropy * mask).sum().item())

    def _metrics(
        self, sums: dict[str, float], grad_norm: float, n_micro: int, t0: float, *, stepped: bool
    ) -> StepMetrics:
        """One update's metrics, summed over the ranks (collective); ``stepped``: whether it
        took its optimizer step (see :meth:`_has_gradient`)."""
        keys = list(sums)
        totals = dict(zip(keys, self.engine.sum_across_ranks([sums[k] for k in keys]), strict=True))
        n = max(totals["trained"], 1.0)
        seconds = time.perf_counter() - t0
        return StepMetrics(
            step=self.global_step,
            loss=totals["loss"],
            grad_norm=grad_norm,
            tokens=int(totals["tokens"]),
            trained_tokens=int(totals["trained"]),
            samples=int(totals["samples"]),
            micro_batches=n_micro,
            tokens_per_s=totals["tokens"] / seconds if seconds > 0 else 0.0,
            seconds=seconds,
            lr=self.engine.lr,
            kl=totals["kl"] / n,
            clip_fraction=totals["clip_fraction"] / n,
            entropy=totals["entropy"] / n,
            ratio_mean=totals["ratio_mean"] / n,
            is_weight_mean=totals["is_weight_mean"] / n,
            mismatch_kl=totals["mismatch_kl"] / n,
            mismatch_outside=totals["mismatch_outside"] / n,
            optimizer_steps=int(stepped),
        )

    def _to_device(self, batch: Batch) -> Batch:
        return {k: v.to(self.engine.device, non_blocking=True) for k, v in batch.items()}

    def _empty_batch(self) -> Batch:
        """A two-token, nothing-trained batch for a rank without samples."""
        pad = self.pad_id
        return collate([TrainSample([pad, pad], [0, 0], [0.0, 0.0], 0.0, "", 0.0)], pad)
