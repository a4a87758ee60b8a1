"""The design half of a round: sample documents, design (per attempt), verify, repair, hint.

A slot whose design fails gets another attempt with a new document; the flow loops over
attempts, and each stage here handles one pass. Within an attempt, designs rejected with code
get up to ``designer.repair_turns`` repair turns (:func:`repair`, part of the design stage:
``attempt-<k>-repair-<t>.jsonl``), each verified and settled again. Environment code is stored
content-addressed; a design's verdict is stored under its environment id, so verifying the
same code twice in a round writes one object. An outage is not stored as data: past
``designer.max_failed_share`` of failed requests (or a hint lost to one) a stage raises
InferenceError before it commits, and its Prefect retries run it again.
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
    awaiting_verdict,
    env_id_for,
    generate,
    hint_designs,
    new_attempts,
    repair_designs,
    round_documents,
    verify_design,
)
from spade.inference.base import Backend
from spade.pipeline.keys import fingerprint
from spade.pipeline.record import StageRecord, campaign_store
from spade.pipeline.replay import PLAN_FILE, RoundPlan
from spade.sandbox.policy import load_policy, policy_source
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
    rec.write_jsonl(name, _attempt_rows(batch))
    for a in batch:
        if a.code is not None and a.env_id is not None:
            rec.write_blob(f"code/{a.env_id}", a.code.encode())
    rec.commit(seconds=seconds)


async def repair(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
    attempt: int,
    turn: int,
    batch: list[DesignAttempt],
    backend: Backend,
) -> list[DesignAttempt]:
    """Repair turn ``turn`` of attempt ``attempt``: every design of the settled ``batch``
    rejected with code is told its named failure and answers again (inference only; the
    training tokens stay the first answer's). Returns the whole batch, the repaired designs
    awaiting their verdicts; the design stage lists ``attempt-<k>-repair-<turn>.jsonl``."""
    rec = StageRecord(cfg, campaign_id, round, "design")
    batch = copy.deepcopy(batch)
    await repair_designs(backend, batch, cfg)
    _commit_designs(rec, f"attempt-{attempt}-repair-{turn}.jsonl", batch, union=True)
    return batch


def verify(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
    code: str,
    references: list[dict[str, str]] | None = None,
) -> Verdict:
    """The verifier's checks on one design, in the sandbox, compared with the ``references``
    it must not copy (``{"name", "code"}``); the verdict is stored by env id."""
    started = time.time()
    verdict = verify_design(code, cfg, load_policy(cfg.sandbox.policy_path), references or ())
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

    ``verdicts`` line up with the designs in ``batch`` awaiting one (code, no verdict yet:
    :func:`~spade.designer.designer.awaiting_verdict`); ``earlier`` are the round's settled
    attempts before this one. Returns the settled batch and its slots still open (their design
    was rejected). The stage lists every verdict of the round, a repaired design's first one
    included, and ``attempts.jsonl`` holds ``earlier`` and the batch.
    """
    batch = copy.deepcopy(batch)
    pending = awaiting_verdict(batch)
    if len(pending) != len(verdicts):
        raise ValueError(f"{len(verdicts)} verdicts for {len(pending)} designs awaiting one")
    for att, verdict in zip(pending, verdicts, strict=True):
        apply_verdict(att, verdict)
    attempts = list(earlier) + batch
    source = policy_source(load_policy(cfg.sandbox.policy_path))  # the policy verify ran with
    inputs = {"sandbox_policy": source.path, "sandbox_policy_sha256": source.sha256}
    rec = StageRecord(cfg, campaign_id, round, "verify", inputs)
    spans = []
    for env_id in dict.fromkeys(i for a in attempts for i in _verified_ids(a)):
        rec.outputs[f"verdicts/{env_id}"] = key = rec.key(f"verdicts/{env_id}.json")
        spans.append(rec.cs.store.read_json(key))
    rec.write_jsonl("attempts.jsonl", _attempt_rows(attempts))
    rec.commit(seconds=busy_seconds(spans))
    return batch, [a.slot for a in batch if not a.accepted]


def _verified_ids(att: DesignAttempt) -> list[str]:
    """Env ids of the attempt's verified designs: the first answer's (if repaired), the last."""
    ids = [env_id_for(att.first_code)] if att.first_code is not None else []
    return ids + ([att.env_id] if att.env_id is not None and att.verdict is not None else [])


async def hint(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
    attempts: list[DesignAttempt],
    backend: Backend,
) -> list[DesignAttempt]:
    """A strategy hint for every accepted design (one that leaks the solution is dropped; one
    lost to failed requests raises InferenceError: see :mod:`spade.designer.hints`)."""
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
