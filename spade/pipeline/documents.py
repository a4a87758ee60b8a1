"""The sample_documents stage: the grounding documents a regeneration round's design attempts
may use (seeded by the regeneration), recorded with the round's plan."""

from __future__ import annotations

from dataclasses import asdict

from spade.designer.corpus import Corpus, Document
from spade.designer.designer import round_documents
from spade.pipeline.context import RoundContext
from spade.pipeline.record import StageRecord
from spade.pipeline.replay import PLAN_FILE, RoundPlan
from spade.pipeline.stage import Stage


def sample_documents(ctx: RoundContext, plan: RoundPlan) -> list[Document]:
    """Every document this round's attempts may use (seeded by the regeneration); the round's
    plan is recorded with them."""
    if not plan.designs:
        raise ValueError(
            f"round {ctx.round} replays round {plan.replay_of}: no documents to sample"
        )
    rec = StageRecord(ctx, "sample_documents")
    documents = round_documents(Corpus.load(ctx.config.corpus), ctx.config, plan.regeneration)
    rec.write_json(PLAN_FILE, plan.to_dict())
    rec.write_jsonl("documents.jsonl", [asdict(d) for d in documents])
    rec.commit()
    return documents


STAGE = Stage(
    "sample_documents",
    sections=("seed", "corpus", "designer"),
    entries=("sample_documents", "spade.pipeline.pool:skip_design"),
)
