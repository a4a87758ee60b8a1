"""The evaluate stage: hinted and unhinted plays of each environment of the round (accepted
designs and pool environments, each row marked with its ``source``).

Each environment is evaluated on its own (the flow maps over them, so a resumed round replays
only the environments it had not finished); :func:`commit_evaluations` then commits the stage.

Each round plays its own instances of each environment, the same ones however often the stage
runs (:mod:`spade.agent.evaluate`: a digest of the campaign seed, the round and the
environment). Plays are stored as they finish, as ``envs/<env_id>/plays/<job index>.json``
holding the trajectory (its instance seed with it) and a ``key`` that digests what decides the
play (the weights, the stage's config and code, the environment; the round is in the path): a
retry of the stage (after an outage, a failed write, a killed worker) plays only what is not
stored yet, and one with other weights or settings reuses nothing (its plays overwrite the old
ones). Plays that failed on our side are not stored, so a retry plays them again.
``trajectories.jsonl`` and ``summary.json`` are written once every play is in, as readers
expect.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from spade.agent.evaluate import evaluate_envs
from spade.inference.base import Backend
from spade.pipeline.context import RoundContext
from spade.pipeline.keys import config_hash, fingerprint, stage_code_version
from spade.pipeline.record import StageRecord, busy_seconds, jsonl
from spade.pipeline.stage import Stage
from spade.pipeline.worker import ran_on
from spade.records import EnvEvaluation, EnvSpec, Trajectory
from spade.storage import CampaignStore


async def evaluate_env(
    ctx: RoundContext, env: EnvSpec, backend: Backend, runner: Mapping[str, Any] | None = None
) -> EnvEvaluation:
    """All plays of one environment (those an earlier attempt stored are not played again);
    its trajectories and summary go to the store, the summary with where the plays ran
    (``ran_on``: this process and the task ``runner``'s worker, :mod:`spade.pipeline.worker`).
    ``backend`` serves ``ctx.weights``."""
    started = time.time()
    cs, round = ctx.store, ctx.round
    prefix = f"envs/{env.env_id}"
    plays = cs.layout.stage_key(round, "evaluate", f"{prefix}/plays")
    key = plays_key(ctx, env)
    stored = _stored_plays(cs, plays, key)

    def store(index: int, traj: Trajectory) -> None:
        if not traj.failed:  # an outage's play is played again by the retry
            # encoded as trajectories.jsonl is (a -inf log-prob is kept, not refused)
            row = {"key": key, "trajectory": traj.to_dict()}
            cs.store.write_bytes(f"{plays}/{index:04d}.json", json.dumps(row).encode())

    (evaluation,) = await evaluate_envs(
        backend, [env], ctx.config, ctx.policy, round=round, finished=stored, on_finished=store
    )
    cs.store.write_bytes(
        cs.layout.stage_key(round, "evaluate", f"{prefix}/trajectories.jsonl"),
        jsonl(t.to_dict() for t in evaluation.trajectories),
    )
    cs.store.write_json(
        cs.layout.stage_key(round, "evaluate", f"{prefix}/summary.json"),
        evaluation.summary()
        | {"started": started, "finished": time.time(), "reused_plays": len(stored)}
        | {"ran_on": ran_on(runner)},
    )
    return evaluation


def plays_key(ctx: RoundContext, env: EnvSpec) -> str:
    """What decides an environment's plays, digested: the weights, the evaluate stage's config
    and code, and the environment (code, hint, tool use)."""
    return fingerprint(
        {
            "weights": ctx.weights.to_dict(),
            "config": config_hash(ctx.config, "evaluate"),
            "code": stage_code_version("evaluate"),
            "env": hashlib.sha256(env.code.encode()).hexdigest(),
            "hint": env.hint,
            "tool_use": env.tool_use,
        }
    )


def _stored_plays(cs: CampaignStore, prefix: str, key: str) -> dict[int, Trajectory]:
    """The plays an earlier attempt stored under ``prefix`` with this ``key``, by job index."""
    out = {}
    for name in cs.store.list(prefix):
        try:  # an unreadable play (a torn write elsewhere, an older format) is played again
            row = json.loads(cs.store.read_bytes(name))
            if row["key"] == key:
                index = int(name.rsplit("/", 1)[-1].removesuffix(".json"))
                out[index] = Trajectory.from_dict(row["trajectory"])
        except (ValueError, TypeError, KeyError):
            continue
    return out


def commit_evaluations(ctx: RoundContext, evaluations: list[EnvEvaluation]) -> None:
    """Commit the evaluate stage: one summary line per environment (with its ``source``), and
    which weights played (``ctx.weights``)."""
    weights = ctx.weights.version
    rec = StageRecord(ctx, "evaluate", {"weights": weights})
    spans = []
    for e in evaluations:
        for name in ("trajectories.jsonl", "summary.json"):
            rec.outputs[f"envs/{e.env_id}/{name}"] = rec.key(f"envs/{e.env_id}/{name}")
        spans.append(rec.cs.store.read_json(rec.key(f"envs/{e.env_id}/summary.json")))
    rec.write_jsonl("evaluations.jsonl", [e.summary() | {"weights": weights} for e in evaluations])
    pool = sum(e.source == "pool" for e in evaluations)
    note = f"{len(evaluations) - pool} designed, {pool} pool environments" if evaluations else ""
    status = "completed" if evaluations else "skipped"
    note = note or "no environment to play: no design accepted and no pool environment"
    rec.commit(status, note, seconds=busy_seconds(spans))


STAGE = Stage(
    "evaluate",
    sections=("seed", "model", "evaluation", "scoring", "sandbox.policy_path"),
    entries=("evaluate_env", "commit_evaluations", "spade.inference.pool:shared_backend"),
)
