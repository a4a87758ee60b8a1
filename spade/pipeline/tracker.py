"""What the tracker sinks show of a round besides its numbers, read from the campaign store.

:func:`round_tables` reads a round's stored artifacts and builds its tables with
:mod:`spade.metrics.tables`: its designs (``verify/attempts.jsonl`` for code and verdicts,
``score/scored.jsonl`` for what the agent made of them and the designer's reward,
``hint/environments.jsonl`` for hints) and a seeded sample of its plays
(``evaluate/evaluations.jsonl`` for the environments played and where each came from,
``evaluate/envs/<env_id>/trajectories.jsonl`` for the plays, read only for the environments the
sample reaches). A replay round designed nothing: its designs are the replayed ones, code and
verdicts from the round it replays, numbers from its own plays. Missing files give empty
tables, never an error (a round that stopped early still has the rest).
"""

from __future__ import annotations

from typing import Any

from spade.metrics.tables import RoundTables, design_rows, rollout_row, sample_rollouts
from spade.pipeline.record import read_jsonl
from spade.pipeline.replay import PLAN_FILE
from spade.storage import CampaignStore


def _rows(cs: CampaignStore, round: int, stage: str, name: str) -> list[dict[str, Any]]:
    key = cs.layout.stage_key(round, stage, name)
    return read_jsonl(cs, key) if cs.store.exists(key) else []


def _replay_of(cs: CampaignStore, round: int) -> int | None:
    key = cs.layout.stage_key(round, "sample_documents", PLAN_FILE)
    return cs.store.read_json(key).get("replay_of") if cs.store.exists(key) else None


def round_tables(cs: CampaignStore, round: int, samples: int, seed: int) -> RoundTables:
    """Round ``round``'s designs and ``samples`` of its plays (drawn with the campaign ``seed``
    and the round: the same sample every time the round is logged)."""
    source = _replay_of(cs, round)
    attempts = _rows(cs, round if source is None else source, "verify", "attempts.jsonl")
    hints = {h["env_id"]: h.get("hint") for h in _rows(cs, round, "hint", "environments.jsonl")}
    designs = design_rows(round, attempts, _rows(cs, round, "score", "scored.jsonl"), hints)

    evaluations = _rows(cs, round, "evaluate", "evaluations.jsonl")
    sources = {e["env_id"]: e.get("source", "designed") for e in evaluations}

    def plays(env_id: str) -> list[dict[str, Any]]:
        return _rows(cs, round, "evaluate", f"envs/{env_id}/trajectories.jsonl")

    drawn = sample_rollouts(list(sources), plays, samples, seed=f"{seed}:{round}")
    rollouts = [rollout_row(round, t, sources.get(t.get("env_id", ""), "designed")) for t in drawn]
    return RoundTables(round, designs, rollouts)


__all__ = ["round_tables"]
