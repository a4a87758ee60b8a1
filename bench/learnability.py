"""Learnability check: can the campaign's own training chain make the agent better at anything?

No designer, no environments: one procedurally generated, verifiable task family (sums of whole
numbers, one turn, the number as the answer: bench/learnability_task.py), trained and served
through the code a round uses: completions sampled by the pool's managed llama.cpp server, one
GRPO update per step by :func:`spade.training.run.update_from_parent` (LoRA, the role's sampling
temperature, the optimizer carried from checkpoint to checkpoint: one optimizer for the run),
each checkpoint published by :func:`spade.pipeline.publish.publish` (GGUF adapter, server
restart) and served for the next step. A rise on held-out items therefore proves that chain end
to end; no rise says to look at the optimizer, the learning rate, the publish/serve chain or the
sampler/trainer mismatch (each update's ``mismatch_kl`` is recorded).

1. **Calibration** (``--calib-items`` per level, greedy, base weights): the first level of the
   ladder whose base success is in [0.3, 0.6], nearest 0.45.
2. **Training**: ``--updates`` steps of ``--prompts`` items x ``--samples`` completions at
   ``--temperature`` (``evaluation.temperature``, 0.6: at 1.0 the 0.5B got 3% of its samples
   right and 7 of 8 items gave no gradient), reward 1 for the right number as the reply, 0
   otherwise; advantages z-scored per item (the agent's estimator).
3. **Held-out**: ``--heldout`` items (their own seed stream), greedy, scored with the base
   weights and after every ``--eval-every`` updates; the paired exact McNemar test of the last
   point against the base is the top-level ``p_value``. The rise is split into format (readable
   answers) and correctness among readable answers.

``--sweep`` instead runs the learning rate x LoRA rank grid (``--sweep-lrs``, ``--sweep-ranks``)
for ``--sweep-updates`` steps each, scored on ``--val-items`` validation items (never the
held-out stream), and prints the best setting. ``--quick`` is a smoke run on the shipped
SmolLM2-135M (a minute or two). Defaults (the demo's config and Qwen2.5-Coder-0.5B) took 45 min
on 2 cores (the budget: about 75). Benchmarks report; they do not assert. A table prints,
JSON goes to ``--out`` (default bench/results/learnability.json) and the figure beside it
(``.png``).

Usage: ``.venv/bin/python bench/learnability.py [--quick] [--updates N] [--lr X] [--rank R]
[--sweep] [--seed S] [--out PATH]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from chain import publish_step  # bench/chain.py
from learnability_task import (
    LEVELS,
    Item,
    calibrated_level,
    items,
    mcnemar,
    moving_average,
    score,
)
from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

console = Console()
CAMPAIGN = "learnability"
STEP_METRICS = ("mismatch_kl", "mismatch_outside", "zero_variance_groups", "loss", "grad_norm")


def build_config(args: argparse.Namespace, store: Path, lr: float, rank: int) -> Any:
    from spade.config import load_config

    overrides = {
        "model.name_or_path": args.model,
        "storage.root": str(store),
        "evaluation.temperature": args.temperature,
        "training.lr": lr,
        "training.lora.enabled": True,
        "training.lora.rank": rank,
        "training.lora.alpha": 2 * rank,
        "inference.backend": "llamacpp",
        "inference.llamacpp.parallel": 4,
        "run.train": True,
    }
    return load_config(args.config, overrides=overrides)


async def _complete(cfg: Any, weights: Any, requests: list[Any]) -> list[Any]:
    from spade.inference.pool import shared_backend

    async with shared_backend(cfg, weights) as backend:
        return list(await backend.complete(requests))


def ask(cfg: Any, weights: Any, batch: list[Item], n: int, temperature: float, seed: int,
        max_tokens: int) -> list[Any]:  # fmt: skip
    """``n`` completions of each item's question (item-major order)."""
    from spade.inference.base import ChatRequest, SamplingParams

    requests = [
        ChatRequest(
            [{"role": "user", "content": item.question}],
            SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed + j),
        )
        for item in batch
        for j in range(n)
    ]
    return asyncio.run(_complete(cfg, weights, requests))


def evaluate(cfg: Any, weights: Any, batch: list[Item], max_tokens: int) -> dict[str, Any]:
    """Greedy answers to ``batch``: per item (readable, correct), and the rates."""
    outs = ask(cfg, weights, batch, 1, 0.0, 0, max_tokens)
    scored = [score(o.text if o.ok else "", item) for o, item in zip(outs, batch, strict=True)]
    readable = [r for r, _ in scored]
    correct = [c for _, c in scored]
    n = len(batch)
    right_of_readable = sum(correct) / max(sum(readable), 1)
    return {"readable": readable, "correct": correct, "success": sum(correct) / n,
            "format": sum(readable) / n, "correct_if_readable": right_of_readable}  # fmt: skip


def train_step(cfg: Any, parent: str | None, batch: list[Item], outs: list[Any], root: str,
               samples_per: int) -> tuple[Any, dict[str, float]]:  # fmt: skip
    """One GRPO update of the agent from ``parent`` on the scored completions."""
    from spade.training.run import update_from_parent
    from spade.training.samples import assign_advantages, completion_sample

    samples, rewards, readable = [], [], []
    for k, out in enumerate(outs):
        item = batch[k // samples_per]
        ok, right = score(out.text if out.ok else "", item)
        rewards.append(float(right))
        readable.append(ok)
        if not (out.ok and out.token_ids):
            continue  # nothing sampled to train on (counted in the rates all the same)
        ids, lps = out.prompt_token_ids, out.logprobs
        samples.append(completion_sample(ids, out.token_ids, lps, float(right), item.key))
    assign_advantages(samples, scale_by_std=cfg.training.advantage_std)
    update = update_from_parent(cfg, "agent", parent, samples, root)
    stats = {"reward": sum(rewards) / len(rewards), "format": sum(readable) / len(readable)}
    return update, stats


def calibrate(cfg: Any, args: argparse.Namespace) -> tuple[tuple[int, int], dict[str, float]]:
    from spade.records import BASE

    rates: dict[tuple[int, int], float] = {}
    for level in LEVELS[: args.max_level]:
        batch = items("calibration", level, args.calib_items, args.seed)
        rates[level] = evaluate(cfg, BASE, batch, args.max_tokens)["success"]
        console.print(f"calibration {level[0]} terms x {level[1]} digits: {rates[level]:.2f}")
        if rates[level] < 0.3:  # harder levels only do worse
            break
    return calibrated_level(rates), {f"{t}x{d}": r for (t, d), r in rates.items()}


def train_run(cfg: Any, args: argparse.Namespace, level: tuple[int, int], evaluate_on: list[Item],
              eval_at: set[int]) -> dict[str, Any]:  # fmt: skip
    """``args.updates`` steps from the base; held-out (or validation) points at ``eval_at``."""
    from spade.records import BASE

    root = str(Path(cfg.storage.root) / "checkpoints")
    weights, parent = BASE, None
    points = [{"update": 0, **evaluate(cfg, BASE, evaluate_on, args.max_tokens)}]
    console.print(f"update 0: held-out success {points[0]['success']:.3f}")
    steps = []
    for u in range(1, args.updates + 1):
        started = time.perf_counter()
        batch = items("train", level, args.prompts, args.seed, start=(u - 1) * args.prompts)
        outs = ask(cfg, weights, batch, args.samples, args.temperature, 1000 * u, args.max_tokens)
        update, stats = train_step(cfg, parent, batch, outs, root, args.samples)
        parent = update.checkpoint
        weights = publish_step(cfg, CAMPAIGN, u, "agent", parent)
        m = update.metrics
        kept = {k: m.get(k) for k in STEP_METRICS}
        steps.append({"update": u, **stats, "seconds": time.perf_counter() - started, **kept})
        console.print(
            f"update {u}: reward {stats['reward']:.2f} format {stats['format']:.2f}"
            f" mismatch {m.get('mismatch_kl', 0):.4f} flat {m.get('zero_variance_groups', 0):.2f}"
            f" ({steps[-1]['seconds']:.0f} s)"
        )
        if u in eval_at:
            points.append({"update": u, **evaluate(cfg, weights, evaluate_on, args.max_tokens)})
            console.print(f"update {u}: held-out success {points[-1]['success']:.3f}")
    return {"points": points, "steps": steps}


def summary(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The last point against the base: McNemar, and the rise split into format and
    correctness among readable answers."""
    base, last = points[0], points[-1]
    test = mcnemar(base["correct"], last["correct"])
    return {
        "base_success": base["success"], "final_success": last["success"],
        "rise": last["success"] - base["success"],
        "format_rise": last["format"] - base["format"],
        "correct_if_readable_rise": last["correct_if_readable"] - base["correct_if_readable"],
        **test,
    }  # fmt: skip


def print_table(points: list[dict[str, Any]], result: dict[str, Any]) -> None:
    table = Table(title="Learnability: held-out success (greedy)")
    for col in ("update", "success", "format", "right if readable", "gained", "lost", "p"):
        table.add_column(col, justify="right")
    for p in points:
        t = mcnemar(points[0]["correct"], p["correct"])
        table.add_row(str(p["update"]), f"{p['success']:.3f}", f"{p['format']:.3f}",
                      f"{p['correct_if_readable']:.3f}", str(t["gained"]), str(t["lost"]),
                      f"{t['p_value']:.3g}")  # fmt: skip
    console.print(table)
    console.print(
        f"rise {result['rise']:+.3f} (format {result['format_rise']:+.3f}, correct among"
        f" readable {result['correct_if_readable_rise']:+.3f}); McNemar p = {result['p_value']:.3g}"
    )


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points, steps = data["points"], data["steps"]
    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    xs = [p["update"] for p in points]
    ax[0][0].plot(xs, [p["success"] for p in points], "o-", label="success")
    ax[0][0].plot(xs, [p["format"] for p in points], "s--", label="readable")
    ax[0][0].axhline(points[0]["success"], color="grey", lw=0.8, label="base success")
    ax[0][0].set(title=f"held-out ({len(points[0]['correct'])} items, greedy)", xlabel="update")
    ax[0][0].legend()
    us = [s["update"] for s in steps]
    ax[0][1].plot(us, moving_average([s["reward"] for s in steps], 5), label="reward (MA 5)")
    ax[0][1].plot(us, moving_average([s["format"] for s in steps], 5), label="readable (MA 5)")
    ax[0][1].set(title="training samples", xlabel="update")
    ax[0][1].legend()
    ax[1][0].plot(us, [s["mismatch_kl"] or 0.0 for s in steps])
    ax[1][0].set(title="sampler/trainer k3 KL (nats/token)", xlabel="update")
    ax[1][1].plot(us, [s["zero_variance_groups"] or 0.0 for s in steps])
    ax[1][1].set(title="share of items without gradient", xlabel="update", ylim=(-0.05, 1.05))
    for a in ax.flat:
        a.ticklabel_format(axis="y", style="plain", useOffset=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sweep(args: argparse.Namespace, store: Path, level: tuple[int, int]) -> dict[str, Any]:
    """The lr x rank grid on validation items (never the held-out stream)."""
    val = items("validation", level, args.val_items, args.seed)
    rows = []
    for lr in args.sweep_lrs:
        for rank in args.sweep_ranks:
            cfg = build_config(args, store / f"lr{lr}-r{rank}", lr, rank)
            sub = argparse.Namespace(**{**vars(args), "updates": args.sweep_updates})
            run = train_run(cfg, sub, level, val, {args.sweep_updates})
            rows.append({"lr": lr, "rank": rank, "base": run["points"][0]["success"],
                         "validation": run["points"][-1]["success"]})  # fmt: skip
    best = max(rows, key=lambda r: r["validation"] - r["base"])
    return {"rows": rows, "best": best}


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "demo-cpu.yaml")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--updates", type=int, default=60)
    # Sampled at 1.0 the 0.5B summed 3% of training items right where greedy got 42%: 7 of 8
    # items had no gradient (every sample wrong). The trainer scores at this temperature.
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--heldout", type=int, default=200)
    ap.add_argument("--eval-every", type=int, default=15)
    ap.add_argument("--calib-items", type=int, default=24)
    ap.add_argument("--max-level", type=int, default=len(LEVELS))
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--sweep-lrs", type=float, nargs="+", default=[5e-5, 2e-4, 1e-3])
    ap.add_argument("--sweep-ranks", type=int, nargs="+", default=[16])
    ap.add_argument("--sweep-updates", type=int, default=8)
    ap.add_argument("--val-items", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="smoke run on SmolLM2-135M")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "learnability.json")
    args = ap.parse_args()
    if args.quick:
        args.model, args.updates, args.prompts, args.samples = "smollm2-135m-instruct", 2, 2, 2
        args.heldout, args.eval_every, args.calib_items, args.max_level = 8, 2, 4, 2
        args.sweep_lrs, args.sweep_updates, args.val_items = [2e-4], 1, 4
    return args


def main() -> None:
    args = arguments()
    from spade.inference.pool import close_shared_backends

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="spade-learnability-") as tmp:
        store = Path(tmp)
        try:  # the pool's llama.cpp server is stopped whatever happens
            cfg = build_config(args, store / "run", args.lr, args.rank)
            level, rates = calibrate(cfg, args)
            settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
            data: dict[str, Any] = {"machine": machine() | {"timestamp": timestamp()},
                                    "settings": settings, "calibration": rates,
                                    "level": {"terms": level[0], "digits": level[1]}}  # fmt: skip
            if args.sweep:
                data["sweep"] = sweep(args, store, level)
                console.print(data["sweep"])
            else:
                heldout = items("heldout", level, args.heldout, args.seed)
                eval_at = set(range(args.eval_every, args.updates + 1, args.eval_every))
                data |= train_run(cfg, args, level, heldout, eval_at | {args.updates})
                data["result"] = summary(data["points"])
                data["p_value"] = data["result"]["p_value"]
                print_table(data["points"], data["result"])
        finally:
            asyncio.run(close_shared_backends())
    data["minutes"] = (time.perf_counter() - started) / 60
    write_json(args.out, data)
    if "points" in data:
        plot(data, args.out.with_suffix(".png"))
    console.print(f"{data['minutes']:.1f} min; written: {args.out}")


if __name__ == "__main__":
    main()
