"""Memory a training rank and an inference GPU need, predicted from the architecture and the
config: what ``spade plan`` prints, preflight checks before round 0, and ``bench/memory.py``
measures on CPU.

Training, per rank, for one micro-batch of ``T`` padded tokens (``N`` of them trained, the
longest sequence ``s``), in bytes:

- **model states**: DeepSpeed's own estimators (``estimate_zero2/3_model_states_mem_needs``)
  for its bf16 mode, whose layout they assume (16-bit parameters, fp32 masters, gradients and
  Adam moments); with fp32 parameters (fp32 masters in the module, bf16 autocast) the same
  layout with 4-byte parameters and gradients, counted here: ZeRO-3 holds, per parameter and
  rank, its partition (4), the fp32 master (4), the gradient partition (4) and Adam's two
  moments (8), plus the largest module gathered whole. The torch engine: 16 bytes per
  parameter (fp32 weight, gradient, two moments).
- **ZeRO buffers**: ZeRO-3's gradient-reduce bucket (``reduce_bucket_size`` elements; a GPU
  commits it whole at start, a CPU only the pages a step touches) and prefetch bucket.
- **activations**: per decoder layer and token, what autograd keeps, counted tensor by tensor
  for this family (``tests/training/test_memory_plan.py`` holds the count to the tensors a real
  layer saves) in each precision; with activation checkpointing a layer keeps only its input,
  and one layer's activations are alive again while it is recomputed in the backward pass.
  (Under ZeRO-3 DeepSpeed's memory-efficient linear keeps, with autocast, one bf16 copy of a
  layer input fewer: the count is transformers' own, 2 bytes per token and hidden unit more.)
- **autocast weight copies**: bf16 autocast caches the bf16 copy of every weight it casts until
  the forward ends: 2 bytes per parameter of every layer, whatever ZeRO-3 partitions.
- **logits**: a chunk of ``training.logprob_chunk_tokens`` positions' fp32 logits and their
  softmax, exponentials and gradient (:mod:`spade.training.scoring`); never the micro-batch's.
- **attention mask**: a batch with padding gets a boolean ``[b, 1, s, s]`` mask, ``T * s`` at
  most.

Inference, per vLLM GPU: the weights' shard (bf16), then the KV cache in what the memory share
leaves, against the longest sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from spade.config import TrainingConfig
from spade.training.architecture import Architecture

__all__ = [
    "Line",
    "Precision",
    "activation_bytes_per_token",
    "inference_memory",
    "model_states",
    "precision_of",
    "training_memory",
]

Precision = Literal["bf16", "autocast", "fp32"]
"""bf16: DeepSpeed's bf16 mode (module in bf16, fp32 masters in its optimizer); autocast: fp32
parameters, bf16 compute; fp32: no reduced precision anywhere (the CPU demo)."""

GIB = 2**30
_REDUCE_BUCKET = 500_000_000  # DeepSpeed's default reduce_bucket_size (elements)
_PREFETCH_BUCKET = 50_000_000  # DeepSpeed's default stage3_prefetch_bucket_size (elements)


@dataclass(frozen=True)
class Line:
    """One part of a memory plan: what it is, its bytes, and how it was counted."""

    what: str
    bytes: int
    how: str = ""


@dataclass
class MemoryPlan:
    """The lines of one device and its peak (their sum)."""

    lines: list[Line] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(line.bytes for line in self.lines)


def precision_of(training: TrainingConfig, weights_dtype: str) -> Precision:
    """The precision a training stage runs in: DeepSpeed's bf16 mode, bf16 autocast over fp32
    masters (bf16 weights, the engines' mixed precision), or fp32."""
    if training.engine == "deepspeed" and training.deepspeed.bf16:
        return "bf16"
    return "autocast" if weights_dtype == "bfloat16" else "fp32"


def activation_bytes_per_token(arch: Architecture, precision: Precision) -> int:
    """What one decoder layer keeps for its backward pass, per token (weights excluded).

    Counted from the tensors autograd saves in transformers' Llama/Qwen layer: the two norms'
    inputs, variances and outputs, the projections' inputs (autocast casts one per projection),
    q and k (and their per-head norms), the rotated q and k, v, attention's output and
    log-sum-exp, the MLP's gate, up, activation and product, and the rotary tables."""
    h, q, kv, i = arch.hidden, arch.q_width, arch.kv_width, arch.intermediate
    a, g, d = arch.heads, arch.kv_heads, arch.head_dim
    per_h, per_i, per_d = {"autocast": (26, 8, 8), "bf16": (16, 8, 4), "fp32": (24, 16, 8)}[
        precision
    ]
    if arch.qk_norm:
        per_q = {"autocast": 10, "bf16": 10, "fp32": 16}[precision]
        small = 8 + 8 * a + 4 * g
    else:
        per_q = {"autocast": 4, "bf16": 4, "fp32": 8}[precision]
        small = 8 + 4 * a
    return per_h * h + per_q * (q + kv) + per_i * i + per_d * d + small


def _residual_bytes(precision: Precision) -> int:
    """Bytes of one element of the residual stream (what a checkpointed layer keeps)."""
    return 2 if precision == "bf16" else 4


def model_states(
    arch: Architecture,
    training: TrainingConfig,
    precision: Precision,
    world: int,
    *,
    committed: bool = True,
) -> list[Line]:
    """Model states and ZeRO buffers of one rank (see the module docstring). ``committed``:
    count buffers whole, as a GPU allocates them; else only what a step touches (a CPU)."""
    p, big = arch.params, arch.largest_group
    if training.lora.enabled:
        return [Line("frozen weights", p * (2 if precision == "bf16" else 4), "LoRA: base frozen")]
    ds = training.deepspeed
    if training.engine == "torch" or ds.zero_stage == 0:
        return [Line("model states", 16 * p, "fp32 weight, gradient, two Adam moments")]
    if precision == "bf16" and ds.zero_stage in (2, 3):
        states = _deepspeed_estimate(p, big, world, ds.zero_stage, ds)
        how = f"DeepSpeed's estimate_zero{ds.zero_stage}_model_states_mem_needs"
        lines = [Line("model states", states, how)]
    elif ds.zero_stage == 3:
        states = 4 * big + (20 * p) // world
        lines = [Line("model states", states, "ZeRO-3, fp32 params: 20 B/param/rank + gathered")]
    elif ds.zero_stage == 2:
        states = 4 * p + (20 * p) // world
        lines = [Line("model states", states, "ZeRO-2, fp32 params: 4 B/param + 20 B/rank")]
    else:  # ZeRO-1: parameters and gradients whole, optimizer state partitioned
        whole = 4 if precision == "bf16" else 8
        lines = [Line("model states", whole * p + (12 * p) // world, "ZeRO-1")]
    if ds.zero_stage == 3:
        grad = 2 if precision == "bf16" else 4
        bucket = _REDUCE_BUCKET if committed else min(_REDUCE_BUCKET, math.ceil(p / world))
        lines.append(Line("reduce bucket", bucket * grad, f"{_REDUCE_BUCKET:.0e} elements"))
        prefetch = min(_PREFETCH_BUCKET, p)
        lines.append(Line("prefetch bucket", prefetch * grad, f"{_PREFETCH_BUCKET:.0e} elements"))
    return lines


def _deepspeed_estimate(p: int, big: int, world: int, stage: int, ds: object) -> int:
    """DeepSpeed's own GPU estimate of its bf16/fp16 model states (additional buffers off:
    they are counted apart)."""
    offload_opt = bool(getattr(ds, "offload_optimizer", False))
    if stage == 3:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

        offload_params = bool(getattr(ds, "offload_params", False))
        _, gpu, _ = estimate_zero3_model_states_mem_needs(
            p, big, world, 1, offload_opt, offload_params, False, 1.0
        )
        return int(gpu)
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    _, gpu = estimate_zero2_model_states_mem_needs(p, world, 1, offload_opt, 1.0)
    return int(gpu)


def training_memory(
    arch: Architecture,
    training: TrainingConfig,
    precision: Precision,
    *,
    tokens: int,
    longest: int,
    trained: int,
    world: int,
    padded: bool = True,
    committed: bool = True,
) -> list[Line]:
    """The peak memory of one training rank for one micro-batch (see the module docstring):
    ``tokens`` padded tokens, sequences of at most ``longest``, ``trained`` of them scored."""
    lines = model_states(arch, training, precision, world, committed=committed)
    r = _residual_bytes(precision)
    per_layer = activation_bytes_per_token(arch, precision) * tokens
    h, v, layers = arch.hidden, arch.vocab, arch.layers
    chunk = min(training.logprob_chunk_tokens, max(trained, 1))
    logit_bytes = 4 if precision == "fp32" else 2
    if training.activation_checkpointing:
        kept = layers * r * h * tokens
        lines.append(Line("layer inputs", kept, f"{layers} checkpointed layers x tokens x hidden"))
        recompute = per_layer + (2 * r * h + 6 * arch.intermediate) * tokens
        lines.append(Line("one layer recomputed", recompute, "its activations and gradients"))
    else:
        lines.append(Line("activations", layers * per_layer, f"{layers} layers, kept whole"))
    lines.append(Line("final norm and scored states", (8 + 2 * r * h) * tokens + r * h * trained))
    logits = (14 + logit_bytes) * chunk * v
    lines.append(Line("logits", logits, f"chunks of {chunk} positions x {v} vocabulary"))
    if precision == "autocast":
        cache = 2 * arch.params
        lines.append(Line("autocast weight copies", cache, "bf16 copy of every weight cast"))
    if padded and longest > 0:
        lines.append(Line("attention mask", tokens * longest, "boolean [b, 1, s, s]"))
    return lines


def inference_memory(
    arch: Architecture,
    *,
    gpu_bytes: int,
    share: float,
    tensor_parallel: int,
    max_len: int,
) -> tuple[list[Line], int]:
    """One vLLM GPU: the bf16 weights' shard, an allowance for activations and CUDA graphs,
    the KV cache in what ``share`` of ``gpu_bytes`` leaves; and how many tokens that cache
    holds (negative: the weights alone exceed the share)."""
    weights = 2 * arch.params // tensor_parallel
    overhead = 2 * GIB  # vLLM's profiled activations, sampler and CUDA graphs (assumed)
    kv_heads = max(arch.kv_heads // tensor_parallel, 1)
    per_token = 2 * arch.layers * kv_heads * arch.head_dim * 2  # k and v, bf16
    cache = int(gpu_bytes * share) - weights - overhead
    lines = [
        Line("weights (bf16 shard)", weights, f"1/{tensor_parallel} of the model"),
        Line("activations and graphs", overhead, "assumed"),
        Line("KV cache", max(cache, 0), f"{per_token:,} B/token; max-model-len {max_len}"),
    ]
    return lines, cache // per_token if cache > 0 else -1
