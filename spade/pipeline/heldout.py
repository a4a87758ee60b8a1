"""The held-out hook: unhinted plays of environments the agent never trains on, per round.

``run.heldout_envs`` names environment files or folders (``*.py``); each round plays them with
the round's published weights and stores win rate and mean return per environment.
``run.heldout_suites`` adds benchmark suites (``spade.benchmarks``: reasoning-gym, HumanEval,
BFCL v4 multi-turn): one unhinted play per task of each suite's seeded subset, scored per item,
stored as ``suites.jsonl`` (a row per task), ``transcripts/<suite>.jsonl`` and the suite's mean
score in ``summary.json``.
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
from spade.records import EnvSpec, WeightsRef
from spade.sandbox.policy import SandboxPolicy


def heldout_files(cfg: CampaignConfig) -> list[Path]:
    """The configured held-out environment files, sorted; ConfigError for a missing path."""
    return env_files(cfg.run.heldout_envs, "run.heldout_envs")


async def heldout(ctx: RoundContext, weights: WeightsRef) -> dict[str, Any]:
    """Play every held-out environment unhinted with ``weights`` (the round's published ones);
    commit ``heldout`` (skipped when none)."""
    cfg = ctx.config
    rec = StageRecord(ctx, "heldout", {"weights": weights.version})
    files = heldout_files(cfg)
    if not files and not cfg.run.heldout_suites:
        rec.commit("skipped", "no held-out environments or suites configured (run.heldout_*)")
        return {}
    policy = ctx.policy
    async with shared_backend(cfg, weights) as backend:
        overall = await _play_files(backend, files, cfg, policy, rec, weights)
        suites: dict[str, Any] = {}
        rows: list[dict[str, Any]] = []
        for sc in cfg.run.heldout_suites:
            result = await play_suite(backend, sc, cfg, policy)
            suites[sc.name] = result.summary()
            rec.write_jsonl(f"transcripts/{sc.name}.jsonl", result.transcripts)
            rows.extend(result.rows)
    if suites:
        rec.write_jsonl("suites.jsonl", rows)
        overall["suites"] = suites
    rec.write_json("summary.json", overall)
    rec.commit()
    return overall


async def _play_files(
    backend: Backend,
    files: list[Path],
    cfg: CampaignConfig,
    policy: SandboxPolicy,
    rec: StageRecord,
    weights: WeightsRef,
) -> dict[str, Any]:
    """Play the held-out environment files; write ``results.jsonl``; their win rate and mean
    return (partial credit: where a small model wins nothing, what moves first)."""
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
    results = await evaluate_envs(backend, specs, cfg, policy)
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
    rec.write_jsonl("results.jsonl", rows)
    return {
        "win_rate": fmean(r.win_rate for r in results),
        "mean_return": fmean(returns),
        "environments": len(rows),
    }


STAGE = Stage(
    "heldout",
    sections=(
        "model",
        "evaluation",
        "sandbox.policy_path",
        "run.heldout_envs",
        "run.heldout_suites",
        "run.heldout_plays",
    ),
    entries=("heldout",),
)
