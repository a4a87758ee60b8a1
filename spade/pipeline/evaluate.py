"""The evaluate stage: hinted and unhinted plays of each environment of the round (accepted
designs and pool environments, each row marked with its ``source``).

Each environment is evaluated on its own (the flow maps over them, so a resumed round replays
only the environments it had not finished); :func:`commit_evaluations` then commits the stage.
"""

from __future__ import annotations

import time

from spade.agent.evaluate import EnvEvaluation, EnvSpec, evaluate_envs
from spade.config import CampaignConfig
from spade.inference.base import Backend
from spade.pipeline.design import busy_seconds
from spade.pipeline.record import StageRecord, campaign_store, jsonl
from spade.sandbox.policy import load_policy


async def evaluate_env(
    cfg: CampaignConfig, campaign_id: str, round: int, env: EnvSpec, backend: Backend
) -> EnvEvaluation:
    """All plays of one environment; its trajectories and summary go to the store."""
    started = time.time()
    (evaluation,) = await evaluate_envs(backend, [env], cfg, load_policy(cfg.sandbox.policy_path))
    cs = campaign_store(cfg, campaign_id)
    prefix = f"envs/{env.env_id}"
    cs.store.write_bytes(
        cs.layout.stage_key(round, "evaluate", f"{prefix}/trajectories.jsonl"),
        jsonl(t.to_dict() for t in evaluation.trajectories),
    )
    cs.store.write_json(
        cs.layout.stage_key(round, "evaluate", f"{prefix}/summary.json"),
        evaluation.summary() | {"started": started, "finished": time.time()},
    )
    return evaluation


def commit_evaluations(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
    evaluations: list[EnvEvaluation],
    weights: str,
) -> None:
    """Commit the evaluate stage: one summary line per environment (with its ``source``), and
    which weights played."""
    rec = StageRecord(cfg, campaign_id, round, "evaluate", {"weights": weights})
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
