"""Regenerations and replays: which rounds design new environments, which replay old ones.

docs/architecture.md §2.12: between regenerations the reference replays the same environments for
several training steps (``run.regen_interval``: 4 for games, 8 for tool use). Here a round is one
training step, so a *regeneration* round designs (sample → design → verify → hint) and the next
``regen_interval - 1`` rounds *replay* its accepted environments: the agent plays them again with
its current weights, they are scored again (win rate, regret) and the agent trains on the new
plays. Nothing is designed in a replay round, so the designer does not train on one (its
delayed batch comes from regeneration rounds only), and skills rotate per regeneration, not per
round.

Every round records its :class:`RoundPlan` (``sample_documents/plan.json``); the next round
reads it, so the plan survives resumes and a changed interval applies from the next round on.
A regeneration that played nothing is not replayed: the next round designs again. Pool
environments a regeneration played (:mod:`spade.pipeline.pool`: pool mode, or designs filled up
to ``run.min_envs``) are replayed with its designs, by the pool stage.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from spade.errors import StorageError
from spade.pipeline.record import StageRecord, read_jsonl
from spade.records import DesignAttempt
from spade.storage import CampaignStore

if TYPE_CHECKING:  # the context's module imports nothing of this one; a type only
    from spade.pipeline.context import RoundContext

PLAN_FILE = "plan.json"


@dataclass(frozen=True)
class RoundPlan:
    """What a round does before evaluation.

    Attributes:
        regeneration: index of the regeneration the round belongs to (seeds its documents and
            picks its active skills).
        replay_of: the regeneration round whose environments this round replays; None when the
            round designs new ones.
    """

    regeneration: int
    replay_of: int | None = None

    @property
    def designs(self) -> bool:
        return self.replay_of is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_plan(cs: CampaignStore, round: int) -> RoundPlan:
    """The plan round ``round`` recorded. Rounds stored before plans existed designed every
    round with ``regeneration = round``, which is what is returned for them."""
    manifest = cs.read_stage_manifest(round, "sample_documents")
    if manifest is None or not manifest.done:
        raise StorageError(
            f"{cs.store.url(cs.layout.stage_prefix(round, 'sample_documents'))}: round {round}"
            " has not started its design phase; resume that round first"
        )
    key = cs.layout.stage_key(round, "sample_documents", PLAN_FILE)
    if not cs.store.exists(key):
        return RoundPlan(regeneration=round)
    data = cs.store.read_json(key)
    return RoundPlan(int(data["regeneration"]), data.get("replay_of"))


def environment_rows(cs: CampaignStore, round: int, stage: str = "hint") -> list[dict[str, Any]]:
    """The environments a stage of ``round`` handed on: its designs (``hint``) or its pool
    environments (``pool``, :mod:`spade.pipeline.pool`); none when the file is absent."""
    key = cs.layout.stage_key(round, stage, "environments.jsonl")
    return read_jsonl(cs, key) if cs.store.exists(key) else []


def plan_round(ctx: RoundContext) -> RoundPlan:
    """The round's plan, from the previous round's plan and ``run.regen_interval``."""
    round, cs = ctx.round, ctx.store
    if round == 0:
        return RoundPlan(regeneration=0)
    prev = read_plan(cs, round - 1)
    source = round - 1 if prev.replay_of is None else prev.replay_of
    played = environment_rows(cs, source) or environment_rows(cs, source, "pool")
    if round - source < ctx.config.run.regen_interval and played:
        return RoundPlan(prev.regeneration, replay_of=source)
    return RoundPlan(prev.regeneration + 1)


def _replayed_attempts(
    cs: CampaignStore, source: int, environments: list[dict[str, Any]]
) -> list[DesignAttempt]:
    """The accepted designs of regeneration round ``source`` with the hints its hint stage gave
    them (``environments``: that stage's rows)."""
    if not environments:  # it played only pool environments (and may have no attempts file)
        return []
    hints = {row["env_id"]: row for row in environments}
    rows = read_jsonl(cs, cs.layout.stage_key(source, "verify", "attempts.jsonl"))
    out = []
    for row in rows:
        if row.get("accepted") and row.get("env_id") in hints:
            attempt = DesignAttempt.from_dict(row)
            attempt.hint = hints[attempt.env_id]["hint"]
            attempt.hint_note = hints[attempt.env_id].get("hint_note")
            out.append(attempt)
    return out


def replay(ctx: RoundContext, plan: RoundPlan) -> list[DesignAttempt]:
    """The design half of a replay round: record the plan, mark design and verify as skipped,
    and carry the source round's environments (code and hints) into this round's hint stage."""
    if plan.replay_of is None:
        raise ValueError(f"round {ctx.round}: plan {plan} designs; nothing to replay")
    source = plan.replay_of
    note = f"replays the environments of round {source}"
    rec = StageRecord(ctx, "sample_documents", {"replay_of": str(source)})
    rec.write_json(PLAN_FILE, plan.to_dict())
    rec.commit("skipped", note)
    for stage in ("design", "verify"):
        StageRecord(ctx, stage).commit("skipped", note)
    hint = StageRecord(ctx, "hint", {"replay_of": str(source)})
    environments = environment_rows(hint.cs, source)
    for row in environments:  # the code is content-addressed: already stored, only named here
        hint.outputs[f"code/{row['env_id']}"] = row["code_sha256"]
    hint.write_jsonl("environments.jsonl", environments)
    hint.commit(note=note)
    return _replayed_attempts(hint.cs, source, environments)


__all__ = ["PLAN_FILE", "RoundPlan", "environment_rows", "plan_round", "read_plan", "replay"]
