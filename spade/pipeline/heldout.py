"""The held-out hook: unhinted plays of environments the agent never trains on, per round.

``run.heldout_envs`` names environment files or folders (``*.py``); each round plays them with
the round's published weights and stores win rate and mean return per environment.
``run.heldout_suites`` adds benchmark suites (``spade.benchmarks``: reasoning-gym, HumanEval,
BFCL v4 multi-turn): one unhinted play per task of each suite's seeded subset, scored per item,
stored as ``suites.jsonl`` (a row per task), ``transcripts/<suite>.jsonl`` and the suite's mean
score in ``summary.json``. Round 0 also plays the set with the base weights
(``run.heldout_base``), stored under ``base/`` and as ``base`` in ``summary.json``: the
untrained model's numbers that every later round's are compared with. Every rate and mean comes
with its 95% interval over the plays (``*_interval``).
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import Any

from spade.agent.evaluate import evaluate_envs
from spade.benchmarks.runner import play_suite
from spade.config import CampaignConfig
from spade.curriculum.memory import UNKNOWN_SKILL, read_declarations
from spade.curriculum.pool import env_files
from spade.designer.designer import env_id_for
from spade.inference.base import Backend
from spade.inference.pool import shared_backend
from spade.pipeline.context import RoundContext
from spade.pipeline.hint import describe
from spade.pipeline.record import StageRecord
from spade.pipeline.stage import Stage
from spade.records import BASE, EnvSpec, Trajectory, WeightsRef
from spade.sandbox.policy import SandboxPolicy
from spade.stats import bootstrap_interval, interval_json, wilson_interval


def heldout_files(cfg: CampaignConfig) -> list[Path]:
    """The configured held-out environment files, sorted; ConfigError for a missing path."""
    return env_files(cfg.run.heldout_envs, "run.heldout_envs")


async def heldout(ctx: RoundContext, weights: WeightsRef) -> dict[str, Any]:
    """Play every held-out environment unhinted with ``weights`` (the round's published ones),
    and in round 0 with the base weights too (``run.heldout_base``); commit ``heldout``
    (skipped when nothing is configured)."""
    cfg = ctx.config
    base = plays_base(ctx)
    rec = StageRecord(ctx, "heldout", {"weights": weights.version, "base": str(base).lower()})
    files = heldout_files(cfg)
    if not files and not cfg.run.heldout_suites:
        rec.commit("skipped", "no held-out environments or suites configured (run.heldout_*)")
        return {}
    policy = ctx.policy  # every play of the stage runs jailed under the round's policy
    overall = await _play_set(ctx, policy, weights, files, rec, "")
    if base:
        same = weights.version == BASE.version  # nothing trained: the round's plays are base's
        overall["base"] = (
            overall.copy() if same else await _play_set(ctx, policy, BASE, files, rec, "base/")
        )
    rec.write_json("summary.json", overall)
    rec.commit()
    return overall


def plays_base(ctx: RoundContext) -> bool:
    """Whether this held-out stage also plays (or, untrained, reuses) the base weights: once
    per campaign, in round 0."""
    return ctx.config.run.heldout_base and ctx.round == 0


async def _play_set(
    ctx: RoundContext,
    policy: SandboxPolicy,
    weights: WeightsRef,
    files: list[Path],
    rec: StageRecord,
    prefix: str,
) -> dict[str, Any]:
    """The held-out files and suites played with ``weights``; rows and transcripts written
    under ``prefix``; the summary (with 95% intervals) returned."""
    cfg = ctx.config
    async with shared_backend(cfg, weights) as backend:
        overall = await _play_files(backend, files, cfg, policy, rec, weights, prefix)
        suites: dict[str, Any] = {}
        rows: list[dict[str, Any]] = []
        for sc in cfg.run.heldout_suites:
            result = await play_suite(backend, sc, cfg, policy)
            suites[sc.name] = result.summary()
            rec.write_jsonl(f"{prefix}transcripts/{sc.name}.jsonl", result.transcripts)
            rows.extend(result.rows)
    if suites:
        rec.write_jsonl(f"{prefix}suites.jsonl", rows)
        overall["suites"] = suites
    overall["weights"] = weights.version
    return overall


async def _play_files(
    backend: Backend,
    files: list[Path],
    cfg: CampaignConfig,
    policy: SandboxPolicy,
    rec: StageRecord,
    weights: WeightsRef,
    prefix: str = "",
) -> dict[str, Any]:
    """Play the held-out environment files; write ``results.jsonl``; their win rate and mean
    return (partial credit: where a small model wins nothing, what moves first), each with a
    95% interval over the plays of every file together (Wilson for the win rate, bootstrap
    for the mean return)."""
    if not files:
        return {"win_rate": None, "mean_return": None, "environments": 0}
    specs = []
    for f in files:
        code = f.read_text(encoding="utf-8")
        skill = read_declarations(code).get("skill", UNKNOWN_SKILL)
        tool_use, _ = describe(code, policy)  # asks the jail: the code is not run here
        specs.append(EnvSpec(env_id_for(code), code, skill, None, tool_use))
    plays = cfg.run.heldout_plays
    if plays is not None:  # the held-out plays' own count; the rest of evaluation as configured
        cfg = cfg.model_copy(
            update={"evaluation": cfg.evaluation.model_copy(update={"unhinted_plays": plays})}
        )
    # round None: the same instances every round (and for the base weights), so rounds compare
    results = await evaluate_envs(backend, specs, cfg, policy, round=None)
    returns = [fmean(r.unhinted_returns) if r.unhinted_returns else 0.0 for r in results]
    rows = [
        {
            "file": f.name,
            "env_id": r.env_id,
            "skill": r.skill,
            "win_rate": r.win_rate,
            "mean_return": mean_return,
            "failed_plays": r.failed_plays,
            "weights": weights.version,
        }
        for f, r, mean_return in zip(files, results, returns, strict=True)
    ]
    rec.write_jsonl(f"{prefix}results.jsonl", rows)
    threshold = cfg.evaluation.success_threshold
    wins = [t.success(threshold) for r in results for t in r.trajectories if _measured(t)]
    play_returns = [x for r in results for x in r.unhinted_returns]
    return {
        "win_rate": fmean(r.win_rate for r in results),
        "mean_return": fmean(returns),
        "environments": len(rows),
        "plays": len(play_returns),
        "win_rate_interval": interval_json(wilson_interval(sum(wins), len(wins))),
        "mean_return_interval": interval_json(bootstrap_interval(play_returns)),
    }


def _measured(t: Trajectory) -> bool:
    """An unhinted play that did not fail on our side (what the win rate counts)."""
    return not t.hinted and not t.failed


STAGE = Stage(
    "heldout",
    sections=(
        "model",
        "evaluation",
        "sandbox.policy_path",
        "run.heldout_envs",
        "run.heldout_suites",
        "run.heldout_plays",
        "run.heldout_base",
    ),
    entries=("heldout",),
)
