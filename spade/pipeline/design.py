"""The design stage: the designer writes one attempt for every open slot, and repair turns.

A slot whose design fails gets another attempt with a new document; the flow loops over
attempts, and each call here handles one pass. Within an attempt, designs rejected with code
get up to ``designer.repair_turns`` repair turns (:func:`repair`, part of the design stage:
``attempt-<k>-repair-<t>.jsonl``), each verified and settled again
(:mod:`spade.pipeline.verify`). Environment code is stored content-addressed. An outage is not
stored as data: past ``designer.max_failed_share`` of failed requests a stage raises
InferenceError before it commits, and its Prefect retries run it again.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from spade.curriculum.memory import EnvironmentMemory
from spade.designer.corpus import Document
from spade.designer.designer import generate, new_attempts, repair_designs
from spade.inference.base import Backend
from spade.pipeline.context import RoundContext
from spade.pipeline.keys import fingerprint
from spade.pipeline.record import StageRecord
from spade.pipeline.stage import Stage
from spade.records import DesignAttempt


def attempt_rows(attempts: list[DesignAttempt]) -> list[dict[str, Any]]:
    """The rows of an attempts file (``attempt-<k>.jsonl``, ``attempts.jsonl``)."""
    return [a.to_dict() for a in attempts]


async def design(
    ctx: RoundContext,
    attempt: int,
    open_slots: list[int],
    documents: list[Document],
    memory_state: dict[str, Any],
    backend: Backend,
    regeneration: int | None = None,
) -> list[DesignAttempt]:
    """Attempt ``attempt`` of the open slots: prompts, completions, extracted code.

    The stage manifest lists every attempt file so far, so it stays a full account of the
    design stage as attempts are added. ``regeneration`` (default: the round) picks the slots'
    skills and seeds the memory examples.
    """
    inputs = {
        "memory": fingerprint(memory_state),
        "documents": fingerprint([d.doc_id for d in documents]),
    }
    cfg = ctx.config
    rec = StageRecord(ctx, "design", inputs)
    memory = EnvironmentMemory(cfg.memory)
    memory.load_state_dict(memory_state)
    regeneration = ctx.round if regeneration is None else regeneration
    batch = new_attempts(attempt, open_slots, documents, cfg, memory, regeneration)
    await generate(backend, batch, cfg)
    _commit_designs(rec, f"attempt-{attempt}.jsonl", batch, union=attempt > 0)
    return batch


def _commit_designs(
    rec: StageRecord, name: str, batch: list[DesignAttempt], *, union: bool
) -> None:
    """Write ``name`` and the batch's code into the design stage and commit it; with
    ``union``, the manifest keeps the inputs and files of the stage's earlier commits."""
    earlier = rec.cs.read_stage_manifest(rec.round, "design") if union else None
    seconds = time.perf_counter() - rec.t0
    if earlier is not None:  # same keys on a re-run: the union is the same
        rec.outputs.update(earlier.outputs)
        rec.inputs = earlier.inputs | rec.inputs
        seconds += earlier.seconds
    rec.write_jsonl(name, attempt_rows(batch))
    for a in batch:
        if a.code is not None and a.env_id is not None:
            rec.write_blob(f"code/{a.env_id}", a.code.encode())
    rec.commit(seconds=seconds)


async def repair(
    ctx: RoundContext, attempt: int, turn: int, batch: list[DesignAttempt], backend: Backend
) -> list[DesignAttempt]:
    """Repair turn ``turn`` of attempt ``attempt``: every design of the settled ``batch``
    rejected with code is told its named failure and answers again (inference only; the
    training tokens stay the first answer's). Returns the whole batch, the repaired designs
    awaiting their verdicts; the design stage lists ``attempt-<k>-repair-<turn>.jsonl``."""
    rec = StageRecord(ctx, "design")
    batch = copy.deepcopy(batch)
    await repair_designs(backend, batch, ctx.config)
    _commit_designs(rec, f"attempt-{attempt}-repair-{turn}.jsonl", batch, union=True)
    return batch


STAGE = Stage(
    "design",
    sections=("seed", "model", "corpus", "designer", "memory"),
    entries=("design", "repair", "spade.inference.pool:shared_backend"),
)
