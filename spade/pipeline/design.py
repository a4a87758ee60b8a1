"""The design half of a round: sample documents, design (per attempt), verify, hint.

A slot whose design fails gets another attempt with a new document; the flow loops over
attempts, and each stage here handles one pass. Environment code is stored content-addressed;
a design's verdict is stored under its environment id, so verifying the same code twice in a
round writes one object.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict
from typing import Any

from spade.agent.evaluate import EnvSpec
from spade.config import CampaignConfig
from spade.curriculum.memory import EnvironmentMemory
from spade.designer.corpus import Corpus, Document
from spade.designer.designer import (
    DesignAttempt,
    apply_verdict,
    generate,
    hint_designs,
    new_attempts,
    round_documents,
    verify_design,
)
from spade.inference.base import Backend
from spade.pipeline.keys import fingerprint
from spade.pipeline.record import StageRecord, campaign_store
from spade.pipeline.replay import PLAN_FILE, RoundPlan
from spade.sandbox.policy import load_policy
from spade.verify import Verdict


def sample_documents(
    cfg: CampaignConfig, campaign_id: str, round: int, plan: RoundPlan
) -> list[Document]:
    """Every document this round's attempts may use (seeded by the regeneration); the round's
    plan is recorded with them."""
    if not plan.designs:
        raise ValueError(f"round {round} replays round {plan.replay_of}: no documents to sample")
    rec = StageRecord(cfg, campaign_id, round, "sample_documents")
    documents = round_documents(Corpus.load(cfg.corpus), cfg, plan.regeneration)
    rec.write_json(PLAN_FILE, plan.to_dict())
    rec.write_jsonl("documents.jsonl", [asdict(d) for d in documents])
    rec.commit()
    return documents


def _attempt_rows(attempts: list[DesignAttempt]) -> list[dict[str, Any]]:
    return [a.to_dict() for a in attempts]


async def design(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
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
    rec = StageRecord(cfg, campaign_id, round, "design", inputs)
    memory = EnvironmentMemory(cfg.memory)
    memory.load_state_dict(memory_state)
    regeneration = round if regeneration is None else regeneration
    batch = new_attempts(attempt, open_slots, documents, cfg, memory, regeneration)
    await generate(backend, batch, cfg)
    earlier = rec.cs.read_stage_manifest(round, "design") if attempt else None
    seconds = time.perf_counter() - rec.t0
    if earlier is not None:  # same keys on a re-run: the union is the same
        rec.outputs.update(earlier.outputs)
        seconds += earlier.seconds
    rec.write_jsonl(f"attempt-{attempt}.jsonl", _attempt_rows(batch))
    for a in batch:
        if a.code is not None and a.env_id is not None:
            rec.write_blob(f"code/{a.env_id}", a.code.encode())
    rec.commit(seconds=seconds)
    return batch


def verify(cfg: CampaignConfig, campaign_id: str, round: int, code: str) -> Verdict:
    """The verifier's checks on one design, in the sandbox; the verdict is stored by env id."""
    from spade.designer.designer import env_id_for

    started = time.time()
    verdict = verify_design(code, cfg, load_policy(cfg.sandbox.policy_path))
    cs = campaign_store(cfg, campaign_id)
    key = cs.layout.stage_key(round, "verify", f"verdicts/{env_id_for(code)}.json")
    span = {"started": started, "finished": time.time()}
    cs.store.write_json(key, verdict.to_dict() | {"failed_check": verdict.failed_check} | span)
    return verdict


def settle(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
    earlier: list[DesignAttempt],
    batch: list[DesignAttempt],
    verdicts: list[Verdict],
) -> tuple[list[DesignAttempt], list[int]]:
    """Join one attempt's designs with their verdicts; commit the verify stage so far.

    ``verdicts`` line up with the designs in ``batch`` that have code. Returns every attempt of
    the round so far and the slots still open (their design was rejected).
    """
    batch = copy.deepcopy(batch)
    parsed = [a for a in batch if a.code is not None]
    if len(parsed) != len(verdicts):
        raise ValueError(f"{len(verdicts)} verdicts for {len(parsed)} designs with code")
    for att, verdict in zip(parsed, verdicts, strict=True):
        apply_verdict(att, verdict)
    attempts = list(earlier) + batch
    rec = StageRecord(cfg, campaign_id, round, "verify")
    spans = []
    for a in attempts:
        if a.env_id is not None and a.code is not None:
            rec.outputs[f"verdicts/{a.env_id}"] = key = rec.key(f"verdicts/{a.env_id}.json")
            spans.append(rec.cs.store.read_json(key))
    rec.write_jsonl("attempts.jsonl", _attempt_rows(attempts))
    rec.commit(seconds=busy_seconds(spans))
    return attempts, [a.slot for a in batch if not a.accepted]


async def hint(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
    attempts: list[DesignAttempt],
    backend: Backend,
) -> list[DesignAttempt]:
    """A strategy hint for every accepted design (one that leaks the solution is dropped)."""
    rec = StageRecord(cfg, campaign_id, round, "hint")
    attempts = copy.deepcopy(attempts)
    await hint_designs([a for a in attempts if a.accepted], backend, cfg)
    rows = [
        {
            "env_id": a.env_id,
            "skill": a.skill,
            "doc_id": a.doc_id,
            "tool_use": a.tool_use,
            "code_sha256": rec.write_blob(f"code/{a.env_id}", (a.code or "").encode()),
            "hint": a.hint,
            "hint_note": a.hint_note,
        }
        for a in attempts
        if a.accepted
    ]
    rec.write_jsonl("environments.jsonl", rows)
    rec.commit()
    return attempts


def busy_seconds(spans: list[dict[str, Any]]) -> float:
    """Wall time the mapped tasks of a stage were busy: the union of their [started, finished]
    intervals (epoch seconds), so parallel work is not counted twice and gaps are not counted."""
    total, end = 0.0, float("-inf")
    for s in sorted(spans, key=lambda s: s.get("started", 0.0)):
        start, finish = s.get("started"), s.get("finished")
        if start is None or finish is None:
            continue
        if finish > end:
            total += finish - max(start, end)
            end = finish
    return total


def accepted_specs(attempts: list[DesignAttempt]) -> list[EnvSpec]:
    """The environments to evaluate: the accepted designs, in order."""
    return [
        EnvSpec(a.env_id, a.code, a.skill, a.hint, a.tool_use)
        for a in attempts
        if a.accepted and a.code is not None and a.env_id is not None
    ]
