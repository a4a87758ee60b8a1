"""What a hint adds: hinted minus unhinted return on the bundled examples, per hint source.

The regret a round measures is hinted minus unhinted return, so a hint that says nothing makes
every design read as regret 0. For each bundled example this plays ``--plays`` unhinted episodes
and, on the same instances (seeded as a round seeds them), ``--plays`` hinted episodes per hint
source:

- ``declared``: the class's own ``hint`` (written with the game, knowing its answer's form);
- one per hint prompt of :data:`spade.designer.prompts.HINT_PROMPTS` (``designer.hint_prompt``):
  the hint the designer's model writes from the code, as a round asks for it (cleaned, a hint
  that spells out the solution asked again, up to ``designer.hint_tries``). The coach reads the
  code without the class's own ``hint`` (the 1.5B copied it word for word); ``--show-declared``
  shows it, as a round's splice of a bundled parent does.

What a source adds is the mean over examples of the paired difference (hinted minus unhinted
return, per instance), with a bootstrap interval over the paired plays. The examples are split:
the hint prompt is chosen on ``tune`` (the demo's trainable games), and ``heldout`` (the demo's
held-out games) is only reported, never used to choose. Benchmarks report; they do not assert.
A table prints; JSON goes to ``--out`` (default bench/results/hints.json).

Usage: ``.venv/bin/python bench/hints.py [--quick] [--plays N] [--games N] [--parallel N]
[--split tune|heldout|both] [--prompts NAME ...] [--show-declared] [--seed S] [--out PATH]``
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path
from statistics import fmean
from typing import Any

from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

console = Console()
SPLITS = {
    "tune": ("number_hunt", "cargo_knapsack", "polynomial_probe", "switchboard",
             "ownership_riddle", "bank_transfer", "order_fulfillment"),
    "heldout": ("code_breaker", "maze_walk", "sequence_oracle"),
}  # fmt: skip
"""The examples by split: the demo's trainable games and its held-out ones."""


def build_config(args: argparse.Namespace) -> Any:
    from spade.config import load_config

    overrides = {"model.name_or_path": args.model, "evaluation.unhinted_plays": args.plays}
    if args.parallel is not None:  # episodes at once: each one's jail waits for all of them
        overrides["evaluation.max_parallel_episodes"] = args.parallel
    return load_config(args.config, overrides=overrides)


def examples(split: str) -> list[tuple[str, str]]:
    """``(name, code)`` of the split's bundled examples."""
    from spade.envs.examples import example_paths

    paths = {p.stem: p for p in example_paths()}
    return [(name, paths[name].read_text()) for name in SPLITS[split]]


def without_declared_hint(code: str) -> str:
    """``code`` without its classes' ``hint = ...`` assignments (parsed, never run): the 1.5B
    shown a bundled example copied the class's own hint word for word, so a prompt would be
    measured by the declared hint again."""
    import ast

    from spade.pysource import parse_module

    lines = code.splitlines(keepends=True)
    drop: set[int] = set()
    for cls in (n for n in parse_module(code).body if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) else [])  # fmt: skip
            if any(isinstance(t, ast.Name) and t.id == "hint" for t in targets):
                drop.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    return "".join(line for i, line in enumerate(lines) if i not in drop)


async def write_hints(backend: Any, cfg: Any, games: list[tuple[str, str]], prompt: str,
                      solutions: list[list[str]]) -> list:  # fmt: skip
    """The hint the designer writes for each game with hint prompt ``prompt`` (None: none),
    a hint that spells out a move of the game's ``solutions`` asked again, as in a round.
    ``games`` is the code the coach reads (see :func:`without_declared_hint`)."""
    from spade.designer.hints import hint_designs
    from spade.records import DesignAttempt

    designer = cfg.designer.model_copy(update={"hint_prompt": prompt})
    attempts = [
        DesignAttempt(slot=i, attempt=0, skill="", doc_id=name, messages=[], code=code,
                      env_id=name, accepted=True, solution=solution)
        for i, ((name, code), solution) in enumerate(zip(games, solutions, strict=True))
    ]  # fmt: skip
    await hint_designs(attempts, backend, cfg.model_copy(update={"designer": designer}))
    return [a.hint for a in attempts]


async def play(backend: Any, cfg: Any, policy: Any, games: list[tuple[str, str]],
               hints: dict[str, list], seeds: list[int]) -> dict[str, Any]:  # fmt: skip
    """Unhinted plays and each source's hinted plays of every game, on ``seeds``: their
    returns (game -> arm -> per seed) and how they ended (game -> arm -> status -> count)."""
    from spade.agent.evaluate import rollout_settings
    from spade.agent.rollout import EpisodeJob, run_episodes

    jobs, keys = [], []
    for g, (name, code) in enumerate(games):
        for source in [None, *hints]:
            hint = None if source is None else hints[source][g]
            if source is not None and hint is None:
                continue  # no hint written: that source adds nothing here (counted as such)
            jobs += [EpisodeJob(name, code, s, hint, "ToolUseEnv" in code) for s in seeds]
            keys += [(name, source or "unhinted", s) for s in seeds]
    count, step = [0], max(1, len(jobs) // 10)

    def progress(_: int, __: Any) -> None:  # a line per tenth of the plays: runs last an hour
        count[0] += 1
        if count[0] % step == 0 or count[0] == len(jobs):
            console.print(f"played {count[0]}/{len(jobs)}")

    played = await run_episodes(
        backend, jobs, rollout_settings(cfg), policy=policy, on_finished=progress
    )
    returns: dict[str, dict[str, list[float | None]]] = {}
    endings: dict[str, dict[str, dict[str, int]]] = {}  # game -> arm -> status -> plays
    for (name, source, _), t in zip(keys, played, strict=True):
        # failed on our side (the model's request, an expired session): no return (None), so
        # its pair is left out of what a hint adds, and counted in endings
        value = None if t.failed else t.episode_return()
        returns.setdefault(name, {}).setdefault(source, []).append(value)
        arm = endings.setdefault(name, {}).setdefault(source, {})
        arm[t.status] = arm.get(t.status, 0) + 1
    failed = sum(t.failed for t in played)
    if failed:
        console.print(f"[yellow]{failed} of {len(played)} plays failed on the inference side")
    broken = [t for t in played if t.status == "env_failed"]
    if broken:  # a 0 that is not the player's: say so, with the first reason
        console.print(f"[yellow]{len(broken)} of {len(played)} plays ended env_failed, e.g."
                      f" {broken[0].env_id}: {broken[0].failure}")  # fmt: skip
    return {"returns": returns, "endings": endings}


def added(returns: dict[str, dict[str, list[float | None]]], source: str, rng: random.Random,
          resamples: int = 2000) -> dict[str, Any]:  # fmt: skip
    """What ``source`` adds: per game the mean paired difference (a game without its hint adds
    0), their mean, and a 95% bootstrap interval over games and plays. A pair whose hinted or
    unhinted play failed on our side (None) is left out; a game left with no pair, too."""
    diffs = {
        name: [h - u for h, u in zip(by.get(source, by["unhinted"]), by["unhinted"], strict=True)
               if h is not None and u is not None]
        for name, by in returns.items()
    }  # fmt: skip
    diffs = {name: d for name, d in diffs.items() if d}
    per_game = {name: fmean(d) for name, d in diffs.items()}
    names = list(diffs)
    boots = sorted(
        fmean(
            fmean(rng.choices(diffs[n], k=len(diffs[n]))) for n in rng.choices(names, k=len(names))
        )
        for _ in range(resamples)
    )
    low, high = boots[int(0.025 * resamples)], boots[int(0.975 * resamples) - 1]
    return {"per_game": per_game, "mean": fmean(per_game.values()), "interval": [low, high]}


def _resampled(diffs: dict[str, list[float]], names: list[str], rng: random.Random) -> list[float]:
    """Each of ``names``'s mean difference over its plays drawn again with replacement."""
    return [fmean(rng.choices(diffs[n], k=len(diffs[n]))) for n in names]


def report(split: str, returns: dict, hints: dict[str, list], games: list) -> dict[str, Any]:
    rng = random.Random(0)
    sources = ["declared", *[s for s in hints if s != "declared"]]
    rows = {s: added(returns, s, rng) for s in sources}
    table = Table(title=f"What a hint adds ({split}): hinted minus unhinted return")
    table.add_column("game")
    table.add_column("unhinted", justify="right")
    for s in sources:
        table.add_column(s, justify="right")
    for name, _ in games:
        cells = [f"{rows[s]['per_game'][name]:+.3f}" if name in rows[s]["per_game"] else "-"
                 for s in sources]  # fmt: skip
        unhinted = [x for x in returns[name]["unhinted"] if x is not None]
        table.add_row(name, f"{fmean(unhinted):.3f}" if unhinted else "-", *cells)
    means = [f"{rows[s]['mean']:+.3f} [{rows[s]['interval'][0]:+.2f}, "
             f"{rows[s]['interval'][1]:+.2f}]" for s in sources]  # fmt: skip
    table.add_row("mean [95%]", "", *means)
    console.print(table)
    written = {s: dict(zip([n for n, _ in games], h, strict=True)) for s, h in hints.items()}
    return {"added": rows, "returns": returns, "hints": written}


async def run_split(cfg: Any, args: argparse.Namespace, split: str) -> dict[str, Any]:
    from spade.curriculum.memory import read_declarations
    from spade.inference.pool import shared_backend
    from spade.pipeline.hint import solution_of
    from spade.records import BASE
    from spade.sandbox.policy import load_policy

    games = examples(split)[: args.games]
    hints: dict[str, list] = {"declared": [read_declarations(c).get("hint") for _, c in games]}
    seeds = [random.Random(f"{args.seed}:hints:{split}").randrange(2**31) + i
             for i in range(args.plays)]  # fmt: skip
    policy = load_policy(cfg.sandbox.policy_path)
    solutions = [solution_of(code, policy, cfg) for _, code in games]  # asks the jail
    async with shared_backend(cfg, BASE) as backend:
        shown = games if args.show_declared else [(n, without_declared_hint(c)) for n, c in games]
        for prompt in args.prompts:
            hints[prompt] = await write_hints(backend, cfg, shown, prompt, solutions)
            console.print(f"hints written: {prompt}")
        played = await play(backend, cfg, policy, games, hints, seeds)
    return report(split, played["returns"], hints, games) | {"endings": played["endings"]}


def arguments() -> argparse.Namespace:
    from spade.designer.prompts import HINT_PROMPTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "demo-cpu.yaml")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--plays", type=int, default=6)
    ap.add_argument("--split", choices=["tune", "heldout", "both"], default="tune")
    ap.add_argument("--prompts", nargs="+", default=list(HINT_PROMPTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--games", type=int, default=None, help="only the split's first N games")
    ap.add_argument(
        "--parallel",
        type=int,
        default=None,
        help="episodes at once (default: the config's; the 1.5B on 2 cores at 64"
        " outlived the jails' 900 s wall limit)",
    )
    ap.add_argument(
        "--show-declared",
        action="store_true",
        help="the coach reads the class's own hint too (as in a round's splice)",
    )
    ap.add_argument("--quick", action="store_true", help="SmolLM2, 2 plays, 2 games of tune")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "hints.json")
    args = ap.parse_args()
    if args.quick:
        args.model, args.plays, args.games = "smollm2-135m-instruct", 2, 2
    return args


def main() -> None:
    args = arguments()
    from spade.inference.pool import close_shared_backends

    started = time.perf_counter()
    cfg = build_config(args)
    splits = ["tune", "heldout"] if args.split == "both" else [args.split]
    data: dict[str, Any] = {"machine": machine() | {"timestamp": timestamp()},
                            "settings": {k: str(v) if isinstance(v, Path) else v
                                         for k, v in vars(args).items()}}  # fmt: skip
    try:
        for split in splits:
            data[split] = asyncio.run(run_split(cfg, args, split))
    finally:
        asyncio.run(close_shared_backends())
    data["minutes"] = (time.perf_counter() - started) / 60
    write_json(args.out, data)
    console.print(f"{data['minutes']:.1f} min; written: {args.out}")


if __name__ == "__main__":
    main()
