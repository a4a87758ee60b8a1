"""Learning benchmark: SPADE against the fixed-pool GRPO baseline, on environments neither arm
trains on.

Two arms of the same config, model and master seeds, ``--rounds`` rounds each, one agent GRPO
update per round each:

- ``spade``: ``run.env_source: designed`` with ``run.min_envs = designer.envs_per_round``: the
  accepted designs of a round are played and the pool makes up the rest, so every round plays
  exactly ``envs_per_round`` environments; the designer trains on its attempts.
- ``pool``: ``run.env_source: pool``: ``envs_per_round`` environments drawn from the pool each
  regeneration, nothing designed (the reference's fixed-environment GRPO baseline).

Both arms train the agent on ``envs_per_round x evaluation.unhinted_plays`` unhinted episodes
per round (``training.agent_envs_per_update``: the environments whose plays differ first, then a
seeded order) and play the same hinted plays (measurement only); the SPADE arm plays more in a
round where more designs pass than it has slots (``designer.samples_per_slot`` > 1: every
accepted sample is played, for its regret; ``run.pool_envs_min``: a pool game beside them),
which its budget (``spent``) shows, but trains on as many episodes as the pool arm. The pool is
the config's ``run.env_pool`` (the demo's: the two bundled games in which the 0.5B's plays
earned partial rewards), or every bundled example not held out when the config names none. Held
out from both arms: ``run.heldout_envs`` (bundled examples) and a seeded reasoning-gym subset
(``--rg-size`` tasks); after every round the held-out stage plays them unhinted with the round's
published weights, and once before any training with the base weights (round -1, the same for
both arms).

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
with ``complete: false``) and the curve to ``learning.png``. With ``--store``, the same command
run again resumes an interrupted bench: finished campaigns are read back without replaying,
an interrupted one continues from its last committed stage (the campaign's own resume), and
so do the base weights' held-out plays; it also re-reports a finished bench with this
version's columns. Each arm's budget (:data:`learning_report.BUDGET`: the agent's episodes,
each role's optimizer steps and trained tokens) is printed beside the results.

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
from learning_report import (  # bench/learning_report.py (scripts run from bench/)
    ARMS,
    TRAINED,
    Runs,
    comparison,
    fmt,
    mean_of,
    per_round_means,
    plot,
    print_table,
    share_of,
    spent,
)
from report import machine, timestamp, write_json  # bench/report.py

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
DEFAULT_OUT = BENCH / "results" / "learning.json"
DEFAULT_CONFIG = REPO / "configs" / "demo-cpu.yaml"


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
    """An arm's settings: where its environments come from, and the agent's update matched to
    ``envs_per_round`` environments' plays in both (``training.agent_envs_per_update``)."""
    matched = {"training.agent_envs_per_update": envs_per_round}
    if arm == "spade":
        return {"run.env_source": "designed", "run.min_envs": envs_per_round} | matched
    return {"run.env_source": "pool", "run.min_envs": 0, "run.pool_envs_min": 0} | matched


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
    """The held-out plays of the base weights (round -1 of both arms), read back when a
    previous run of the bench committed them to the same store."""
    from spade.inference.pool import close_shared_backends
    from spade.pipeline.campaign import ensure_campaign
    from spade.pipeline.context import RoundContext
    from spade.pipeline.heldout import heldout
    from spade.records import BASE

    ctx = RoundContext.open(cfg, campaign_id, 0)
    ensure_campaign(ctx.store, cfg)
    cs = ctx.store
    if "heldout" in cs.completed_stages(0):  # a previous run of the bench played them
        return dict(cs.store.read_json(cs.layout.stage_key(0, "heldout", "summary.json")))
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
        **{key: summary.get(key) for key in TRAINED},  # updates and tokens per role
        "weights": summary.get("weights"),
        "seconds": round(sum((summary.get("stage_seconds") or {}).values()), 1),
    }


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
        runs: Runs = {arm: {} for arm in ARMS}
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
    runs: Runs,
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
        "spent": {arm: spent(runs[arm]) for arm in ARMS},
        "sweep": sweep_result,
    }


if __name__ == "__main__":
    main()
