"""Learning benchmark: SPADE against the fixed-pool GRPO baseline, on environments neither arm
trains on.

Two arms of the same config, model and master seeds, ``--rounds`` rounds each, one agent GRPO
update per round each:

- ``spade``: ``run.env_source: designed`` with ``run.min_envs = designer.envs_per_round``: the
  accepted designs of a round are played and the pool makes up the rest, so every round plays
  exactly ``envs_per_round`` environments; the designer trains on its attempts.
- ``pool``: ``run.env_source: pool``: ``envs_per_round`` environments drawn from the pool each
  regeneration, nothing designed (the reference's fixed-environment GRPO baseline).

Both arms play ``envs_per_round x evaluation.unhinted_plays`` unhinted episodes per round (what
the agent trains on) and the same hinted plays (measurement only). The pool is the config's
``run.env_pool`` (the demo's: the two bundled games in which the 0.5B's plays earned partial
rewards), or every bundled example not held out when the config names none. Held out from
both arms: ``run.heldout_envs`` (bundled examples) and a seeded reasoning-gym subset
(``--rg-size`` tasks); after every round the held-out stage plays them unhinted with the
round's published weights, and once before any training with the base weights (round -1, the
same for both arms).

Per round: the held-out win rate (environment files) and reasoning-gym score of both arms; of
the SPADE arm, the designer's mean regret on its accepted designs, its mean reward (before
centring) and the share of the agent's unhinted episodes played on designed (not pool)
environments.

``--sweep``: the learning rate x LoRA rank grid (``--sweep-lrs``, ``--sweep-ranks``) on a
validation split of the pool, never the held-out set: the pool arm trains on the pool less
``--sweep-val`` environments (seeded choice) for ``--sweep-rounds`` rounds per setting and is
scored by its mean win rate on them; the best setting is printed with the ``--set`` options that
use it. ``--quick``: a smoke run with the tests' scripted OpenAI-compatible stand-in and a tiny
random-weight policy (minutes, no real model).

Defaults (``configs/demo-cpu.yaml``, 5 rounds, seed 0, 10 reasoning-gym tasks) are sized for
about 90 minutes on 2 cores with the llama.cpp backend; every setting can be overridden
(``--config``, ``--model``, ``--set key=value``). Benchmarks report; they do not assert. A table
prints, JSON goes to ``bench/results/learning.json`` (rewritten after every finished campaign
with ``complete: false``, so hours of runs survive an interruption) and the curve to
``learning.png``.

Usage: ``.venv/bin/python bench/learning.py [--quick] [--config PATH] [--model NAME]
[--rounds N] [--seeds 0 1] [--set key=value ...] [--sweep] [--store DIR] [--out PATH]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

from spade.stats import bootstrap_interval, interval_json, mean

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
DEFAULT_OUT = BENCH / "results" / "learning.json"
DEFAULT_CONFIG = REPO / "configs" / "demo-cpu.yaml"
ARMS = ("spade", "pool")


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``key=value`` pairs, values read as YAML (``training.lr=1e-5``, ``run.rounds=3``)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected key=value")
        out[key] = yaml.safe_load(value)
    return out


def base_overrides(args: argparse.Namespace, heldout: list[str]) -> dict[str, Any]:
    """What the benchmark sets on top of the config (the arms differ only by ``arm_overrides``)."""
    over: dict[str, Any] = {
        "run.heldout_envs": heldout,
        "run.heldout_suites": [{"name": "reasoning_gym", "size": args.rg_size, "seed": 0}],
        "run.heldout_base": False,  # the bench plays the base weights once for both arms
    }
    if args.model:
        over["model.name_or_path"] = args.model
    return over | parse_sets(args.set)


def arm_overrides(arm: str, envs_per_round: int) -> dict[str, Any]:
    if arm == "spade":
        return {"run.env_source": "designed", "run.min_envs": envs_per_round}
    return {"run.env_source": "pool", "run.min_envs": 0}


def absolute(paths: list[str]) -> list[str]:
    """Paths relative to the repository made absolute (the store may be elsewhere)."""
    return [
        p if Path(p).expanduser().exists() or not (REPO / p).exists() else str(REPO / p)
        for p in paths
    ]


def pool_override(pool: str | list[str] | None) -> dict[str, Any]:
    """The config's ``run.env_pool`` with repository-relative paths made absolute (the bench
    runs from bench/); nothing when the config leaves the default pool."""
    if pool is None:
        return {}
    return {"run.env_pool": absolute([pool] if isinstance(pool, str) else pool)}


def run_arm(cfg: Any, campaign_id: str) -> list[dict[str, Any]]:
    """One campaign of ``cfg.run.rounds`` rounds; its per-round summaries. The pooled backends
    are closed after it: the next campaign's weights carry the same version names."""
    from flows.campaign import campaign_flow
    from spade.inference.pool import close_shared_backends

    try:
        status = asyncio.run(campaign_flow(config=cfg, campaign_id=campaign_id))
    finally:
        asyncio.run(close_shared_backends())
    return list(status["rounds"])


def base_heldout(cfg: Any, campaign_id: str) -> dict[str, Any]:
    """The held-out plays of the base weights (round -1 of both arms)."""
    from spade.inference.pool import close_shared_backends
    from spade.pipeline.campaign import ensure_campaign
    from spade.pipeline.context import RoundContext
    from spade.pipeline.heldout import heldout
    from spade.records import BASE

    ctx = RoundContext.open(cfg, campaign_id, 0)
    ensure_campaign(ctx.store, cfg)
    try:
        return asyncio.run(heldout(ctx, BASE))
    finally:
        asyncio.run(close_shared_backends())


def rg_score(suites: dict[str, Any]) -> float | None:
    return (suites.get("reasoning_gym") or {}).get("score")


def round_row(summary: dict[str, Any]) -> dict[str, Any]:
    """The numbers the benchmark keeps from one round's summary."""
    designed, pool = summary.get("designed_episodes") or 0, summary.get("pool_episodes") or 0
    return {
        "round": summary["round"],
        "heldout_win_rate": summary.get("heldout_win_rate"),
        "heldout_return": summary.get("heldout_mean_return"),
        "reasoning_gym": rg_score(summary.get("heldout_suites") or {}),
        "accepted": summary.get("accepted"),
        "pool_envs": summary.get("pool_envs"),
        "designer_regret": summary.get("designed_regret"),
        "designer_reward": summary.get("designer_reward"),
        "designed_episodes": designed,
        "pool_episodes": pool,
        "designed_share": designed / (designed + pool) if designed + pool else None,
        "agent_loss": summary.get("train_loss"),
        "agent_skipped": summary.get("agent_skipped"),
        "weights": summary.get("weights"),
        "seconds": round(sum((summary.get("stage_seconds") or {}).values()), 1),
    }


def mean_of(rows: list[dict[str, Any]], key: str) -> float | None:
    return mean(r.get(key) for r in rows)


def per_round_means(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Across seeds: each round's mean of every numeric column."""
    rounds = sorted({r["round"] for rows in runs.values() for r in rows})
    keys = (
        "heldout_win_rate",
        "heldout_return",
        "reasoning_gym",
        "designer_regret",
        "designer_reward",
    )
    out = []
    for n in rounds:
        rows = [r for rows in runs.values() for r in rows if r["round"] == n]
        row = {"round": n} | {k: mean_of(rows, k) for k in (*keys, "designed_share")}
        for k in ("heldout_return", "heldout_win_rate"):  # across seeds, 95% bootstrap
            row[f"{k}_interval"] = interval_json(bootstrap_interval(present(rows, k)))
        out.append(row)
    return out


def present(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [r[key] for r in rows if r.get(key) is not None]


COMPARED = ("heldout_return", "heldout_win_rate", "reasoning_gym")
"""The held-out measures compared across seeds at the end."""


def comparison(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per held-out measure, across seeds: each arm's last-round value and its mean over all
    rounds (less noisy than one round), each with its 95% bootstrap interval over seeds, and
    SPADE minus pool paired by seed (the same master seed: the same documents, pool draws
    and held-out tasks) with its interval. With few seeds the intervals are wide and the
    bootstrap cannot see variation the seeds did not show: read them as that."""
    seeds = sorted(set(runs["spade"]) & set(runs["pool"]), key=int)
    out: dict[str, Any] = {"seeds": seeds}
    for key in COMPARED:
        entry: dict[str, Any] = {}
        for view in ("last", "all_rounds"):
            per_arm = {arm: [_seed_value(runs[arm][s], key, view) for s in seeds] for arm in ARMS}
            diffs = [
                a - b
                for a, b in zip(per_arm["spade"], per_arm["pool"], strict=True)
                if a is not None and b is not None
            ]
            entry[view] = {arm: _summary(values) for arm, values in per_arm.items()} | {
                "spade_minus_pool": _summary(diffs)
            }
        out[key] = entry
    return out


def _seed_value(rows: list[dict[str, Any]], key: str, view: str) -> float | None:
    """One seed's value: its last round's, or its mean over every round."""
    if view == "last":
        return rows[-1].get(key) if rows else None
    return mean_of(rows, key)


def _summary(values: list[float | None]) -> dict[str, Any]:
    xs = [v for v in values if v is not None]
    return {
        "values": xs,
        "mean": mean(xs),
        "interval": interval_json(bootstrap_interval(xs)),
    }


def fmt(value: Any, digits: int = 3) -> str:
    return (
        "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    )


def print_table(data: dict[str, Any]) -> None:
    console = Console()
    spade, pool = data["means"]["spade"], data["means"]["pool"]
    table = Table(title="Held-out (never trained on): SPADE vs the fixed pool, mean over seeds")
    for col in (
        "round",
        "spade win",
        "pool win",
        "spade ret",
        "pool ret",
        "spade rg",
        "pool rg",
        "regret",
        "reward",
        "share",
    ):
        table.add_column(col, justify="right")
    base = data["base"]
    table.add_row(
        "base",
        fmt(base["win_rate"]),
        fmt(base["win_rate"]),
        fmt(base.get("return")),
        fmt(base.get("return")),
        fmt(base["rg"]),
        fmt(base["rg"]),
        "",
        "",
        "",
    )
    for s, p in zip(spade, pool, strict=True):
        table.add_row(
            str(s["round"]), fmt(s["heldout_win_rate"]), fmt(p["heldout_win_rate"]),
            fmt(s["heldout_return"]), fmt(p["heldout_return"]),
            fmt(s["reasoning_gym"]), fmt(p["reasoning_gym"]), fmt(s["designer_regret"]),
            fmt(s["designer_reward"]), fmt(s["designed_share"], 2),
        )  # fmt: skip
    console.print(table)
    console.print(f"designed share of the SPADE arm's episodes: {fmt(data['designed_share'], 2)}")
    console.print(comparison_table(data["comparison"]))


def comparison_table(comp: dict[str, Any]) -> Table:
    """Across seeds: each arm's held-out measures and SPADE - pool, with 95% intervals."""
    table = Table(
        title=f"Across seeds {', '.join(comp['seeds'])}: mean [95% bootstrap interval over seeds]"
    )
    for col in ("measure", "rounds", "spade", "pool", "spade - pool"):
        table.add_column(col, justify="right")
    for key in COMPARED:
        for view, label in (("last", "last"), ("all_rounds", "mean of all")):
            cells = comp[key][view]
            table.add_row(
                key,
                label,
                *(with_interval(cells[c]) for c in ("spade", "pool", "spade_minus_pool")),
            )
    return table


def with_interval(summary: dict[str, Any]) -> str:
    interval = summary["interval"]
    bounds = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
    return fmt(summary["mean"]) + bounds


def plot(data: dict[str, Any], path: Path) -> None:
    """Held-out mean return (partial credit) of both arms per round (base at round -1): each
    seed thin, the mean of seeds thick with its 95% bootstrap band over seeds, the win rate
    dashed; and the designer's regret, reward and designed share beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    base = data["base"]
    for arm, colour in (("spade", "tab:blue"), ("pool", "tab:orange")):
        for rows in data["runs"][arm].values():
            xs = [-1, *[r["round"] for r in rows]]
            ys = [base.get("return"), *[r["heldout_return"] for r in rows]]
            left.plot(xs, ys, color=colour, alpha=0.3, lw=1, label=None)
        means = data["means"][arm]
        xs = [-1, *[m["round"] for m in means]]
        ys = [base.get("return"), *[m["heldout_return"] for m in means]]
        left.plot(xs, ys, color=colour, lw=2.5, marker="o", label=f"{arm} return (mean of seeds)")
        bands = [(m["round"], m["heldout_return_interval"]) for m in means]
        bands = [(x, iv) for x, iv in bands if iv]
        if bands:
            left.fill_between(
                [x for x, _ in bands], [iv[0] for _, iv in bands], [iv[1] for _, iv in bands],
                color=colour, alpha=0.15, lw=0,
            )  # fmt: skip
        wins = [base.get("win_rate"), *[m["heldout_win_rate"] for m in means]]
        left.plot(xs, wins, color=colour, lw=1.5, ls="--", label=f"{arm} win rate")
    left.set(
        xlabel="round (-1: base weights)",
        ylabel="held-out unhinted mean return",
        ylim=(-0.02, 1.02),
    )
    left.set_title("Held-out environments (never trained on)")
    left.legend()
    means = data["means"]["spade"]
    rounds = [m["round"] for m in means]
    right.plot(rounds, [m["designer_regret"] for m in means], marker="o", label="designer regret")
    right.plot(rounds, [m["designer_reward"] for m in means], marker="s", label="designer reward")
    share = right.twinx()
    share.bar(rounds, [m["designed_share"] or 0.0 for m in means], alpha=0.2, color="gray")
    share.set(ylabel="share of episodes on designed envs", ylim=(0, 1))
    right.set(xlabel="round", title="SPADE arm: the designer")
    right.legend(loc="upper left")
    for ax in (left, right):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sweep(load: Any, args: argparse.Namespace, store: Path, heldout: list[str]) -> dict[str, Any]:
    """LR x LoRA rank on a validation split of the pool (pool arm, held-out set untouched)."""
    from spade.pipeline.pool import pool_envs

    cfg0 = load({"run.heldout_envs": heldout})
    pool = pool_envs(cfg0)
    val = random.Random("sweep:0").sample(pool, min(args.sweep_val, len(pool) - 1))
    folder = store / "sweep-pool"
    folder.mkdir(parents=True, exist_ok=True)
    for env in pool:
        if env not in val:
            (folder / f"{env.name}.py").write_text(env.code)
    val_files = []
    for env in val:
        val_files.append(str(store / "sweep-val" / f"{env.name}.py"))
        Path(val_files[-1]).parent.mkdir(parents=True, exist_ok=True)
        Path(val_files[-1]).write_text(env.code)
    results = []
    for lr in args.sweep_lrs:
        for rank in args.sweep_ranks:
            over = {
                **arm_overrides("pool", cfg0.designer.envs_per_round),
                "run.env_pool": str(folder),
                "run.heldout_envs": val_files,
                "run.heldout_suites": [],
                "run.rounds": args.sweep_rounds,
                "storage.root": str(store / f"sweep-lr{lr}-r{rank}"),
                "training.lr": lr,
                "training.designer_lr": lr,
                "training.lora.enabled": True,
                "training.lora.rank": rank,
                "training.lora.alpha": 2 * rank,
            }
            rows = [round_row(s) for s in run_arm(load(over), f"sweep-lr{lr}-r{rank}")]
            score, win = mean_of(rows, "heldout_return"), mean_of(rows, "heldout_win_rate")
            results.append(
                {
                    "lr": lr,
                    "rank": rank,
                    "validation_return": score,
                    "validation_win_rate": win,
                    "rounds": rows,
                }
            )
            print(
                f"sweep lr={lr} rank={rank}: mean validation return {fmt(score)},"
                f" win rate {fmt(win)}",
                flush=True,
            )
    # by mean return (partial credit), not win rate: a small model wins nothing on most games,
    # and a grid of zero win rates would pick its first setting
    best = max(
        results,
        key=lambda r: -1.0 if r["validation_return"] is None else r["validation_return"],
    )
    lr, rank = best["lr"], best["rank"]
    use = " ".join(
        f"--set {k}={v}"
        for k, v in (
            ("training.lr", lr),
            ("training.designer_lr", lr),
            ("training.lora.enabled", "true"),
            ("training.lora.rank", rank),
            ("training.lora.alpha", 2 * rank),
        )
    )
    print(f"best: lr={best['lr']} rank={best['rank']}; use: {use}")
    return {"validation": [e.name for e in val], "results": results, "best": best, "use": use}


def quick_setup(stack: contextlib.ExitStack, tmp: Path) -> tuple[None, dict[str, Any]]:
    """The scripted stand-in (it plays environments it does not know with a fixed move) and a
    tiny LoRA policy: a smoke run of every step in minutes. The pool is the scripted HalfEnv
    (the stand-in wins its even puzzles: returns that differ, so the agent trains) and one
    bundled example; the demo's settings that close the loop (graded rewards, one skill)."""
    from spade.testing.openai_server import FakeOpenAIServer
    from spade.testing.scripted_designer import (
        HALF,
        ScriptedModel,
        round_overrides,
        tiny_policy_overrides,
        write_corpus,
        write_tiny_policy,
    )

    class Fallback(ScriptedModel):
        def play(self, messages: list[dict[str, Any]]) -> str:
            try:
                return super().play(messages)
            except AttributeError:  # not one of the scripted designs
                return "\\boxed{E}"

    server = stack.enter_context(FakeOpenAIServer(script=Fallback()))
    pool = tmp / "pool"
    pool.mkdir()
    (pool / "half.py").write_text(HALF)
    shutil.copy(REPO / "spade" / "envs" / "examples" / "switchboard.py", pool)
    over = round_overrides(server, write_corpus(tmp / "corpus.jsonl")) | {
        **tiny_policy_overrides(write_tiny_policy(tmp / "policy")),
        "designer.envs_per_round": 2,
        "evaluation.unhinted_plays": 4,
        "evaluation.hinted_plays": 2,
        "evaluation.max_turns": 3,
        "training.lora.enabled": True,
        "training.lora.rank": 4,
        "training.lora.alpha": 8,
        "designer.active_skills": 1,
        "scoring.rejected_reward": "graded",
        "run.regen_interval": 1,
        "run.env_pool": str(pool),
    }
    return None, over


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="scripted stand-in and tiny policy")
    ap.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help="campaign config of both arms"
    )
    ap.add_argument("--model", help="model.name_or_path for both arms")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per arm")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="master seeds")
    ap.add_argument("--rg-size", type=int, default=10, help="reasoning-gym tasks held out")
    ap.add_argument("--set", action="append", default=[], help="config override key=value")
    ap.add_argument("--sweep", action="store_true", help="LR x LoRA rank sweep on validation")
    ap.add_argument("--sweep-lrs", type=float, nargs="+", default=[1e-5, 3e-5, 1e-4])
    ap.add_argument("--sweep-ranks", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--sweep-rounds", type=int, default=2)
    ap.add_argument("--sweep-val", type=int, default=2, help="pool environments for validation")
    ap.add_argument(
        "--sweep-only",
        action="store_true",
        help="the sweep alone (implies --sweep); JSON to <out>-sweep.json",
    )
    ap.add_argument("--store", type=Path, help="keep the campaigns here (default: a temp folder)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    args.sweep = args.sweep or args.sweep_only
    if args.quick:
        args.rounds, args.rg_size = min(args.rounds, 2), 1
        args.sweep_lrs, args.sweep_ranks, args.sweep_rounds = args.sweep_lrs[:1], [4], 1
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # flows/ (the round's Prefect flows)
    from prefect.testing.utilities import prefect_test_harness

    from spade.config import load_config

    harness: Any = (
        contextlib.nullcontext()
        if os.environ.get("PREFECT_API_URL")
        else prefect_test_harness(server_startup_timeout=120)
    )
    with (
        tempfile.TemporaryDirectory(prefix="spade-bench-learning-") as tmp_name,
        harness,
        contextlib.ExitStack() as stack,
    ):
        tmp = Path(tmp_name)
        store = args.store.resolve() if args.store else tmp / "store"
        config_path, extra = (args.config, {})
        if args.quick:
            config_path, extra = quick_setup(stack, tmp)
        file_cfg = load_config(config_path)
        heldout = absolute(
            file_cfg.run.heldout_envs or load_config(DEFAULT_CONFIG).run.heldout_envs
        )
        common = base_overrides(args, heldout) | pool_override(file_cfg.run.env_pool) | extra

        def load(over: dict[str, Any]) -> Any:
            return load_config(config_path, {**common, "run.rounds": args.rounds, **over})

        sweep_result = sweep(load, args, store, heldout) if args.sweep else None
        if args.sweep_only:
            out = args.out.with_name(args.out.stem + "-sweep.json")
            write_json(out, {"machine": machine(), "timestamp": timestamp(), "sweep": sweep_result})
            print(f"written: {out}")
            return
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {arm: {} for arm in ARMS}
        base: dict[str, Any] = {}
        envs = load({}).designer.envs_per_round
        for seed in args.seeds:
            for arm in ARMS:
                where = {"seed": seed, "name": f"learning-{arm}", "storage.root": str(store / arm)}
                cfg = load(where | arm_overrides(arm, envs))
                print(f"seed {seed}: {arm} arm, {args.rounds} rounds ...", flush=True)
                runs[arm][str(seed)] = [round_row(s) for s in run_arm(cfg, f"{arm}-s{seed}")]
                # each finished campaign is on disk at once: a bench of hours loses at most one
                write_json(args.out, results(args, heldout, base, runs, sweep_result, done=False))
            if not base:
                cfg = load({"seed": seed, "storage.root": str(store / "base")})
                got = base_heldout(cfg, "base")
                base = {
                    "win_rate": got.get("win_rate"),
                    "return": got.get("mean_return"),
                    "rg": rg_score(got.get("suites") or {}),
                }
        if args.store is None:
            shutil.rmtree(store, ignore_errors=True)
    data = results(args, heldout, base, runs, sweep_result, done=True)
    write_json(args.out, data)
    plot(data, args.out.with_suffix(".png"))
    print_table(data)
    print(f"written: {args.out} and {args.out.with_suffix('.png')}")


def results(
    args: argparse.Namespace,
    heldout: list[str],
    base: dict[str, Any],
    runs: dict[str, dict[str, list[dict[str, Any]]]],
    sweep_result: dict[str, Any] | None,
    *,
    done: bool,
) -> dict[str, Any]:
    """The JSON the bench writes: after every campaign (``complete`` false: the seeds and arms
    run so far, compared where both arms of a seed have run) and at the end."""
    return {
        "machine": machine(),
        "timestamp": timestamp(),
        "complete": done,
        "mode": "quick" if args.quick else str(args.config),
        "settings": {
            "rounds": args.rounds,
            "seeds": args.seeds,
            "rg_size": args.rg_size,
            "set": args.set,
            "model": args.model,
            "heldout_envs": heldout,
        },
        "base": base,
        "runs": runs,
        "means": {arm: per_round_means(runs[arm]) for arm in ARMS},
        "comparison": comparison(runs),
        "designed_share": share_of(runs["spade"]),
        "sweep": sweep_result,
    }


def share_of(runs: dict[str, list[dict[str, Any]]]) -> float | None:
    """The share of all the SPADE arm's unhinted episodes that were played on designed envs."""
    designed = sum(r["designed_episodes"] for rows in runs.values() for r in rows)
    pool = sum(r["pool_episodes"] for rows in runs.values() for r in rows)
    return designed / (designed + pool) if designed + pool else None


if __name__ == "__main__":
    main()
