"""Training benchmark: GRPO steps on plain torch against DeepSpeed ZeRO, same model, same batch.

One run trains the same initial weights on the same synthetic batch (random token ids, a masked
prompt and a trained completion per sample, rewards in groups) with each engine: one warm-up
step, then ``--steps`` timed steps. Reported per engine: tokens per second per step (tokens run
through the model, padding excluded, over the step's wall time: the pi_old forward, the training
forward/backward and the optimizer update), the step time, and DeepSpeed's ratio to torch. On
CUDA, also the model FLOPs utilisation ``6 * params * tokens / step time / peak`` with the
peak given by ``--peak-tflops`` (the conventional 6N per token counts the training forward and
backward only; the extra no-grad pi_old forward adds 2N more per token, which this figure does
not credit).

Model: ``tiny`` (default; a random-weight Llama built here, see ``--hidden``/``--layers``), any
local Hugging Face folder, or ``smollm2-135m-instruct`` (through ``spade.inference.models``).
DeepSpeed runs in this one process (a one-rank gloo group on CPU); its ops compile on first use
(cached under ``TORCH_EXTENSIONS_DIR``, see ``spade.training.engines``), outside the timing.

Benchmarks report; they do not assert. A table prints, JSON goes to
``bench/results/train.json`` (with machine info and a timestamp).

Usage: ``.venv/bin/python bench/train.py [--quick] [--model NAME] [--steps N] [--samples N]
[--seq-len T] [--zero-stage S] [--lora] [--peak-tflops F] [--engines torch,deepspeed]
[--out PATH]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

from spade.config import ModelConfig, TrainingConfig
from spade.training.samples import TrainSample, assign_advantages
from spade.training.trainer import GRPOTrainer

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "train.json"


def load_model(args: argparse.Namespace, device: torch.device) -> tuple[torch.nn.Module, int]:
    """A fresh copy of the benchmarked model (same weights every call) and its pad id."""
    if args.model == "tiny":
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=args.vocab,
            hidden_size=args.hidden,
            intermediate_size=args.hidden * 8 // 3,
            num_hidden_layers=args.layers,
            num_attention_heads=max(1, args.hidden // 64),
            num_key_value_heads=max(1, args.hidden // 128),
            max_position_embeddings=max(2 * args.seq_len, 256),
        )
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
        # --dtype as a named model gets it: bf16 weights make the torch engine keep fp32
        # masters and run forward passes under bf16 autocast, as DeepSpeed's bf16 mode does
        dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(args.dtype)
        return (model.to(device, dtype=dtype) if dtype else model.to(device)), 0
    from spade.inference.models import load_model_and_tokenizer, resolve_model

    resolved = resolve_model(ModelConfig(name_or_path=args.model))
    model, tokenizer = load_model_and_tokenizer(resolved, dtype=args.dtype, device=device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return model, int(pad)


def batch(n: int, seq_len: int, vocab: int, group_size: int = 4) -> list[TrainSample]:
    """``n`` samples of ``seq_len`` tokens, the first quarter a masked prompt; seeded."""
    gen = torch.Generator().manual_seed(0)
    prompt = seq_len // 4
    samples = []
    for i in range(n):
        ids = torch.randint(3, vocab, (seq_len,), generator=gen).tolist()
        mask = [0] * prompt + [1] * (seq_len - prompt)
        beh = [0.0] * prompt + [-8.0] * (seq_len - prompt)  # a plausible sampler log-prob
        reward = float(torch.rand((1,), generator=gen))
        samples.append(TrainSample(ids, mask, beh, reward, f"env-{i // group_size}"))
    assign_advantages(samples, "zscore")
    return samples


def measure(engine: str, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    model, pad = load_model(args, device)
    params = sum(p.numel() for p in model.parameters())
    config = TrainingConfig(
        engine=engine,  # type: ignore[arg-type]
        lr=1e-5,
        micro_batch_tokens=args.micro_batch_tokens,
        lora={"enabled": args.lora},
        deepspeed={"zero_stage": args.zero_stage, "bf16": args.dtype == "bfloat16"},
    )
    trainer = GRPOTrainer(model, pad, config)
    vocab = int(model.config.vocab_size)
    samples = batch(args.samples, args.seq_len, vocab)
    trainer.step(samples)  # warm-up: allocator, kernels, DeepSpeed's first-step set-up
    runs = []
    for _ in range(args.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        m = trainer.step(samples)
        runs.append(m)
    seconds = statistics.median(m.seconds for m in runs)
    tokens = runs[0].tokens
    result: dict[str, Any] = {
        "engine": engine if engine == "torch" else f"deepspeed zero-{args.zero_stage}",
        "params": params,
        "trainable_params": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        "tokens_per_step": tokens,
        "micro_batches": runs[0].micro_batches,
        "step_seconds_median": seconds,
        "tokens_per_s": tokens / seconds,
        "tokens_per_s_per_step": [m.tokens_per_s for m in runs],
        "loss_last": runs[-1].loss,
    }
    if device.type == "cuda" and args.peak_tflops:
        result["mfu"] = 6 * params * tokens / seconds / (args.peak_tflops * 1e12)
    del trainer, model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 steps, 8 x 64 tokens")
    ap.add_argument("--model", default="tiny", help="'tiny', a local HF folder, or an alias")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per engine")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--micro-batch-tokens", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=256, help="tiny model: hidden size")
    ap.add_argument("--layers", type=int, default=4, help="tiny model: layers")
    ap.add_argument("--vocab", type=int, default=4096, help="tiny model: vocabulary")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--zero-stage", type=int, default=2, choices=[0, 1, 2, 3])
    ap.add_argument("--lora", action="store_true", help="train LoRA adapters (default: full)")
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="device peak, for MFU (CUDA)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--engines",
        default="torch,deepspeed",
        help="engines to measure, comma-separated (the ratio needs both)",
    )
    args = ap.parse_args()
    if args.quick:
        args.steps, args.samples, args.seq_len = 2, 8, 64
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    started = time.perf_counter()
    engines = args.engines.split(",")
    if not engines or any(e not in ("torch", "deepspeed") for e in engines):
        ap.error(f"--engines: torch and/or deepspeed, not {args.engines!r}")
    results = [measure(engine, args, device) for engine in engines]
    by_engine = dict(zip(engines, results, strict=True))
    ratio = (
        by_engine["deepspeed"]["tokens_per_s"] / by_engine["torch"]["tokens_per_s"]
        if len(by_engine) == 2
        else None
    )

    title = (
        f"GRPO training: {args.model} ({results[0]['params'] / 1e6:.1f}M params"
        f"{', LoRA' if args.lora else ''}), {args.samples} x {args.seq_len} tokens, {device.type}"
    )
    table = Table(title=title)
    columns = ["engine", "tokens/s", "step s", "micro-batches", "tokens/step"]
    columns += ["MFU"] if "mfu" in results[0] else []
    for col in columns:
        table.add_column(col, justify="right")
    for r in results:
        row = [r["engine"], f"{r['tokens_per_s']:.0f}", f"{r['step_seconds_median']:.3f}"]
        row += [str(r["micro_batches"]), str(r["tokens_per_step"])]
        row += [f"{r['mfu']:.1%}"] if "mfu" in r else []
        table.add_row(*row)
    if ratio is not None:
        table.add_row("deepspeed / torch", f"{ratio:.2f}x", *[""] * (len(columns) - 2))
    Console().print(table)

    result = {
        "machine": machine()
        | {
            "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
            "torch": torch.__version__,
        },
        "timestamp": timestamp(),
        "model": args.model,
        "settings": {
            k: getattr(args, k)
            for k in (
                "steps",
                "samples",
                "seq_len",
                "micro_batch_tokens",
                "zero_stage",
                "lora",
                "dtype",
                "hidden",
                "layers",
                "vocab",
            )
        },
        "results": results,
        "deepspeed_over_torch": ratio,
        "wall_seconds": time.perf_counter() - started,
    }
    write_json(args.out, result)
    Console().print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
