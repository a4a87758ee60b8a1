"""Memory benchmark: the memory plan's prediction (``spade.training.memory_plan``) against the
measured peak of a real training step, on CPU, across model sizes, token counts, activation
checkpointing and the two bf16 precisions the GPU presets could run in.

Models: random-weight Qwen3 models built here (the presets' family, the presets' 151,936-entry
vocabulary), three sizes. Each configuration runs in a fresh process (``--one``): DeepSpeed
ZeRO-3 on one gloo rank (the presets' engine), one micro-batch of ``T`` tokens (a quarter of
them prompt, the rest trained), two GRPO steps. Measured: the process's peak resident memory
during the second step (``VmHWM``, reset after the first with ``/proc/self/clear_refs``) less
its resident memory before the model was built; glibc is told to return every freed block of
64 KiB or more to the system (``MALLOC_MMAP_THRESHOLD_``), so resident memory follows live
tensors. Predicted: ``training_memory`` for the same model, tokens and settings on one rank,
counting buffers as a CPU touches them (``committed=False``). Also timed: the second step.

Precision: ``autocast`` is the trainer's mixed precision with DeepSpeed's ``torch_autocast``
(fp32 parameters and masters, bf16 compute); ``bf16`` is DeepSpeed's bf16 mode (bf16 module,
fp32 masters in the optimizer). The table puts them side by side at equal settings: this is
the measurement the presets' ``deepspeed.bf16`` is chosen by.

Benchmarks report; they do not assert. A table prints, JSON goes to ``bench/results/memory.json``.

Usage: ``.venv/bin/python bench/memory.py [--quick] [--jobs N] [--out PATH]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "memory.json"
VOCAB = 151936
SIZES = {  # the presets' family (Qwen3: q/k norms, GQA, SwiGLU, tied embeddings), smaller
    "qwen3-s": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 768},
    "qwen3-m": {"hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
                "num_key_value_heads": 4, "head_dim": 64, "intermediate_size": 1536},
    "qwen3-l": {"hidden_size": 768, "num_hidden_layers": 8, "num_attention_heads": 12,
                "num_key_value_heads": 4, "head_dim": 64, "intermediate_size": 2304},
}  # fmt: skip
TOKENS = (512, 1024, 2048)


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """One configuration in this process: measured peak and predicted peak (bytes)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from spade.config import TrainingConfig
    from spade.training.architecture import Architecture
    from spade.training.memory_plan import training_memory
    from spade.training.samples import TrainSample
    from spade.training.trainer import GRPOTrainer

    shape = {**SIZES[spec["size"]], "vocab_size": VOCAB, "tie_word_embeddings": True}
    tokens, bf16 = spec["tokens"], spec["precision"] == "bf16"
    config = TrainingConfig(
        engine="deepspeed",
        lr=1e-6,
        micro_batch_tokens=tokens,
        activation_checkpointing=spec["checkpointing"],
        deepspeed={"zero_stage": 3, "bf16": bf16},
    )
    prompt = tokens // 4
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (tokens,), generator=gen).tolist()
    mask = [0] * prompt + [1] * (tokens - prompt)
    sample = TrainSample(ids, mask, [-1.0] * tokens, 1.0, "g", advantage=1.0)
    baseline = _rss_kib("VmRSS")
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**shape)).to(torch.bfloat16)
    trainer = GRPOTrainer(model, 0, config, temperature=0.7)
    trainer.step([sample])  # Adam's moments are made here
    Path("/proc/self/clear_refs").write_text("5")  # the peak from here on
    started = time.perf_counter()
    trainer.step([sample])
    seconds = time.perf_counter() - started
    measured = (_rss_kib("VmHWM") - baseline) * 1024
    arch = Architecture.from_config({"model_type": "qwen3", **shape})
    lines = training_memory(
        arch,
        config,
        "bf16" if bf16 else "autocast",
        tokens=tokens,
        longest=tokens,
        trained=tokens - prompt,
        world=1,
        padded=False,
        committed=False,
    )
    predicted = sum(line.bytes for line in lines)
    return {
        **spec,
        "params": arch.params,
        "measured": measured,
        "predicted": predicted,
        "ratio": predicted / measured,
        "step_seconds": seconds,
        "lines": [[line.what, line.bytes] for line in lines],
    }


def _spawn(spec: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "TOKENIZERS_PARALLELISM": "false"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{spec} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _grid(quick: bool) -> list[dict[str, Any]]:
    sizes = ["qwen3-s"] if quick else list(SIZES)
    # quick: 128 tokens, a smoke run; on cores without native bf16 a bf16 step of the presets'
    # vocabulary takes ~100 s at 512 tokens (an AVX2-only EPYC), a quarter of that here
    tokens = (128,) if quick else TOKENS
    return [
        {"size": s, "tokens": t, "checkpointing": c, "precision": p}
        for s in sizes
        for t in tokens
        for c in (False, True)
        for p in ("autocast", "bf16")
    ]


def _table(rows: list[dict[str, Any]]) -> Table:
    gib = 2**30
    table = Table(title="Training step memory: predicted vs measured (CPU, ZeRO-3, one rank)")
    for col in ("model", "params", "tokens", "ckpt", "precision", "predicted", "measured",
                "pred/meas", "step s"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["size"],
            f"{r['params'] / 1e6:.0f}M",
            str(r["tokens"]),
            "on" if r["checkpointing"] else "off",
            r["precision"],
            f"{r['predicted'] / gib:.2f} GiB",
            f"{r['measured'] / gib:.2f} GiB",
            f"{r['ratio']:.2f}",
            f"{r['step_seconds']:.1f}",
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one size, one token count")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--jobs",
        type=int,
        help="configurations measured at once (default 1; 2 with --quick): each peak is its own"
        " process's, but step times are shared cores' then",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a worker: one configuration
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return
    console = Console(width=140)
    jobs = args.jobs or (2 if args.quick else 1)
    specs, rows = _grid(args.quick), []
    with ThreadPoolExecutor(jobs) as pool:  # each configuration is a process of its own
        for spec, r in zip(specs, pool.map(_spawn, specs), strict=True):
            rows.append(r)
            console.print(f"{spec}: predicted/measured {r['ratio']:.2f}, {r['step_seconds']:.1f} s")
    console.print(_table(rows))
    ratios = [r["ratio"] for r in rows]
    pairs = {}
    for r in rows:  # the two precisions at equal settings
        key = (r["size"], r["tokens"], r["checkpointing"])
        pairs.setdefault(key, {})[r["precision"]] = r
    bf16_over_autocast = [
        {"size": k[0], "tokens": k[1], "checkpointing": k[2],
         "memory": v["bf16"]["measured"] / v["autocast"]["measured"],
         "time": v["bf16"]["step_seconds"] / v["autocast"]["step_seconds"]}
        for k, v in pairs.items() if len(v) == 2
    ]  # fmt: skip
    summary = {
        "worst_ratio": max(ratios, key=lambda x: abs(x - 1.0)),
        "within_25_percent": sum(0.75 <= x <= 1.25 for x in ratios),
        "configurations": len(ratios),
        "bf16_over_autocast": bf16_over_autocast,
    }
    console.print(json.dumps(summary, indent=1))
    write_json(args.out, {"machine": machine(), "timestamp": timestamp(), "rows": rows, **summary})


if __name__ == "__main__":
    main()
