"""A campaign's GPU plan: which GPUs serve and which train, and whether each has the memory it
needs (``spade plan``, and preflight's ``plan`` check before round 0).

Per training rank, the peak of one micro-batch at the config's worst case: the longest sample
(``model.max_context_tokens``) or the micro-batch budget (``training.micro_batch_tokens``),
whichever is larger (a sample longer than the budget gets a micro-batch of its own), every
token trained, with padding. Per vLLM GPU, its weights' shard and the KV cache its memory share
leaves, which must hold at least one sequence of ``--max-model-len``. The lines come from
:mod:`spade.training.memory_plan`; a rank is planned to fit in 95% of its GPU (the CUDA context
and the allocator's fragmentation take the rest).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from spade.config import CampaignConfig
from spade.errors import ConfigError
from spade.placement import Placement, check_placement
from spade.training.architecture import Architecture, architecture
from spade.training.memory_plan import (
    GIB,
    Line,
    inference_memory,
    precision_of,
    training_memory,
)

__all__ = ["CampaignPlan", "check_plan", "gpu_memory_bytes", "plan_campaign"]

TRAIN_USABLE = 0.95


@dataclass
class CampaignPlan:
    """The plan of one campaign on ``gpus`` GPUs of ``gpu_bytes`` each."""

    gpus: int
    gpu_bytes: int
    arch: Architecture
    where: Placement
    precision: str
    tokens: int
    train: list[Line] = field(default_factory=list)
    serve: list[Line] = field(default_factory=list)
    kv_tokens: int = 0
    max_len: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def train_total(self) -> int:
        return sum(line.bytes for line in self.train)

    @property
    def serve_total(self) -> int:
        return sum(line.bytes for line in self.serve)

    def summary(self) -> str:
        """One line: placement, each device's peak against its memory."""
        parts = [self.where.describe()]
        if self.train:
            parts.append(
                f"a training rank needs {self.train_total / GIB:.1f} of {self.gpu_bytes / GIB:.0f}"
                f" GiB ({self.precision}, {self.tokens} tokens a micro-batch)"
            )
        if self.serve:
            parts.append(f"a vLLM GPU's KV cache holds {self.kv_tokens:,} tokens")
        return "; ".join(parts)


def _flag(args: list[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in ``args`` (None: absent)."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def plan_campaign(cfg: CampaignConfig, gpus: int, gpu_bytes: int) -> CampaignPlan:
    """The plan of ``cfg`` on ``gpus`` GPUs of ``gpu_bytes`` each; its ``problems`` say what
    does not fit (empty: it fits). ConfigError when the GPUs overlap or are too few."""
    where = check_placement(cfg, gpus)
    arch = architecture(cfg.model)
    dtype = "bfloat16" if cfg.model.dtype in ("auto", "fast", "bfloat16") else cfg.model.dtype
    training = cfg.training
    precision = precision_of(training, dtype)
    tokens = max(training.micro_batch_tokens, cfg.model.max_context_tokens)
    out = CampaignPlan(gpus, gpu_bytes, arch, where, precision, tokens)
    if where.train and cfg.run.train:
        out.train = training_memory(
            arch,
            training,
            precision,
            tokens=tokens,
            longest=cfg.model.max_context_tokens,
            trained=tokens,
            world=len(where.train) if training.engine == "deepspeed" else 1,
        )
        if out.train_total > TRAIN_USABLE * gpu_bytes:
            out.problems.append(
                f"a training rank needs {out.train_total / GIB:.1f} GiB, its GPU has"
                f" {gpu_bytes / GIB:.0f} GiB ({TRAIN_USABLE:.0%} usable): turn on"
                " training.activation_checkpointing, lower training.micro_batch_tokens or"
                " model.max_context_tokens, or add training.ranks"
            )
    if where.serve:
        _plan_serving(cfg, out)
    return out


def _plan_serving(cfg: CampaignConfig, out: CampaignPlan) -> None:
    vllm = cfg.inference.vllm
    share = float(_flag(vllm.extra_args, "--gpu-memory-utilization") or 0.9)
    out.max_len = int(_flag(vllm.extra_args, "--max-model-len") or cfg.model.max_context_tokens)
    out.serve, out.kv_tokens = inference_memory(
        out.arch,
        gpu_bytes=out.gpu_bytes,
        share=share,
        tensor_parallel=vllm.tensor_parallel_size,
        max_len=out.max_len,
    )
    if out.kv_tokens < out.max_len:
        out.problems.append(
            f"a vLLM GPU's KV cache holds {max(out.kv_tokens, 0):,} tokens, fewer than one"
            f" sequence of --max-model-len {out.max_len}: raise --gpu-memory-utilization or"
            " inference.vllm.tensor_parallel_size, or lower --max-model-len"
        )


def check_plan(plan: CampaignPlan) -> CampaignPlan:
    """``plan``, or ConfigError naming every part that does not fit."""
    if plan.problems:
        raise ConfigError("the campaign does not fit its GPUs: " + "; ".join(plan.problems))
    return plan


def gpu_memory_bytes() -> list[int]:
    """Each visible GPU's memory (``nvidia-smi``); empty without an NVIDIA driver."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    query = [smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
    try:  # a driver that does not answer is a node without usable GPUs
        out = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(float(line)) * 2**20 for line in out.stdout.split() if line.strip()]


def describe(plan: CampaignPlan) -> dict[str, Any]:
    """The plan as JSON-ready data."""
    return {
        "gpus": plan.gpus,
        "gpu_gib": plan.gpu_bytes / GIB,
        "serve": list(plan.where.serve),
        "train": list(plan.where.train),
        "precision": plan.precision,
        "tokens": plan.tokens,
        "training_rank": [[line.what, line.bytes, line.how] for line in plan.train],
        "vllm_gpu": [[line.what, line.bytes, line.how] for line in plan.serve],
        "kv_tokens": plan.kv_tokens,
        "problems": plan.problems,
    }
