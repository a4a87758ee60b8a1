"""Rollout benchmark: batched multi-turn episodes against one episode at a time.

The same model (the shipped SmolLM2-135M-Instruct on CPU by default, through the in-process
transformers backend), the same environments and seeds, the same sampling settings, played
twice in one run: (a) one episode at a time (``max_parallel=1``, batch size 1), (b) all
episodes live at once with batched generation (``max_parallel=N``, batch size N). Reported:
episodes per second and generated tokens per second for each, and the ratio (the figure).

Benchmarks report; they do not assert. Tables print, JSON goes to
``bench/results/rollouts.json`` (with machine info and a timestamp).

Usage: ``.venv/bin/python bench/rollouts.py [--quick] [--episodes N] [--out PATH]``
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

from spade.agent import EpisodeJob, RolloutSettings, run_episodes
from spade.config import InferenceConfig, ModelConfig
from spade.envs.examples import example_paths

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "rollouts.json"
GAMES = ["code_breaker", "maze_walk", "polynomial_probe", "sequence_oracle"]


def jobs(n: int) -> list[EpisodeJob]:
    paths = {p.stem: p for p in example_paths()}
    codes = [(stem, paths[stem].read_text()) for stem in GAMES]
    return [
        EpisodeJob(codes[i % len(codes)][0], codes[i % len(codes)][1], seed=i) for i in range(n)
    ]


async def measure(
    model: ModelConfig, n: int, parallel: int, turns: int, tokens: int
) -> dict[str, Any]:
    from spade.inference.hf import TransformersBackend

    backend = TransformersBackend(model, InferenceConfig(batch_size=parallel))
    settings = RolloutSettings(
        max_turns=turns, temperature=1.0, max_tokens_per_turn=tokens, max_parallel=parallel, seed=7
    )
    await run_episodes(backend, jobs(min(n, parallel)), settings)  # warm-up: jails, kernels
    t0 = time.perf_counter()
    trajs = await run_episodes(backend, jobs(n), settings)
    wall = time.perf_counter() - t0
    await backend.aclose()
    generated = sum(t.generated_tokens for t in trajs)
    turns_played = sum(len(t.turns) for t in trajs)
    return {
        "parallel": parallel,
        "episodes": len(trajs),
        "turns": turns_played,
        "generated_tokens": generated,
        "seconds": wall,
        "episodes_per_s": len(trajs) / wall,
        "tokens_per_s": generated / wall,
        "statuses": {s: sum(t.status == s for t in trajs) for s in {t.status for t in trajs}},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 episodes, 2 turns, 24 tokens")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    n, turns, tokens = (4, 2, 24) if args.quick else (args.episodes, 4, 48)
    model = ModelConfig(name_or_path=args.model)
    started = time.perf_counter()
    one = asyncio.run(measure(model, n, 1, turns, tokens))
    batched = asyncio.run(measure(model, n, n, turns, tokens))
    ratio = {k: batched[k] / one[k] for k in ("episodes_per_s", "tokens_per_s")}

    table = Table(
        title=f"Rollouts: {n} episodes x {turns} turns x {tokens} tokens, {args.model}, CPU"
    )
    for col in ("mode", "episodes/s", "gen tokens/s", "tokens", "seconds"):
        table.add_column(col, justify="right")
    for label, r in (("one at a time", one), (f"batched x{n}", batched)):
        table.add_row(
            label,
            f"{r['episodes_per_s']:.3f}",
            f"{r['tokens_per_s']:.1f}",
            str(r["generated_tokens"]),
            f"{r['seconds']:.1f}",
        )
    table.add_row(
        "ratio", f"{ratio['episodes_per_s']:.2f}x", f"{ratio['tokens_per_s']:.2f}x", "", ""
    )
    Console().print(table)

    result = {
        "machine": machine(),
        "timestamp": timestamp(),
        "model": args.model,
        "settings": {"episodes": n, "turns": turns, "tokens_per_turn": tokens},
        "one_at_a_time": one,
        "batched": batched,
        "ratio": ratio,
        "wall_seconds": time.perf_counter() - started,
    }
    write_json(args.out, result)
    Console().print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
