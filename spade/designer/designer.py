"""One batch of designs: prompt, generate, extract, verify in the sandbox, repair, then hint.

A design is asked for by ``designer.strategy``, one module of :mod:`spade.designer.strategies`
each (*write* a new environment from the document, *edit* or *splice* a parent from the memory,
*scaffold* the model's bodies into the harness's frame): the strategy fills an attempt's prompt,
says how it is sampled, reads the code in its answers and says whether and how it is repaired;
this module runs the batch and dispatches to it by name. Every attempt carries the references
it must not copy (its parent and the examples its prompt showed), which the verifier's
duplicate check compares it with. A design rejected with code gets up to
``designer.repair_turns`` more answers in the same conversation, each told the verifier's named
failure (inference only: the attempt's training tokens stay the first answer's).

Every attempt is recorded, accepted or not, with the reason it failed: rejected designs are
data (the designer is trained on them too). Slots whose attempt failed get a new document
and try again, up to ``attempts_per_slot``; attempts of all open slots go out as one batch.

An attempt whose design or repair request failed on our side (server down, request error,
timeout: :attr:`DesignAttempt.failed`) is not data: it is counted and left out of the
designer's rewards, its training batch, the memory and the acceptance counts. Past
``designer.max_failed_share`` of a batch's requests, and whenever a hint request's failure
leaves an accepted design without a hint (its regret would read 0), the step raises
:class:`~spade.errors.InferenceError`, so the stage is retried instead of storing an outage.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import random
from collections.abc import Sequence
from typing import Any

from spade.config import CampaignConfig
from spade.curriculum.memory import EnvironmentMemory
from spade.designer.corpus import Corpus, Document
from spade.designer.hints import hint_designs
from spade.designer.skills import active_skills, slot_skills
from spade.designer.solvability import audit_designs
from spade.designer.strategies import WRITE, Slot, Strategy, strategy_for
from spade.errors import InferenceError
from spade.inference.base import Backend, ChatRequest, Completion, SamplingParams
from spade.records import INFERENCE, DesignAttempt, Verdict
from spade.records import env_id_for as env_id_for  # imported from here by pipeline and pools
from spade.sandbox.policy import SandboxPolicy
from spade.verify import Reference, verify

TRACEBACK_LINES = 6
"""Last lines of a failed check's traceback kept in the verdict and told to a repair turn."""


def round_documents(corpus: Corpus, cfg: CampaignConfig, regeneration: int) -> list[Document]:
    """The grounding documents of one regeneration: one per possible attempt, seeded.

    Attempt ``k`` of slot ``s`` uses document ``k * envs_per_round + s``; the corpus is walked
    once before any document repeats, so a retried slot gets a new document.
    """
    d = cfg.designer
    documents = corpus.stream(random.Random(f"{cfg.seed}:{d.seed}:{regeneration}"))
    return [next(documents) for _ in range(d.envs_per_round * d.attempts_per_slot)]


def slot_plan(cfg: CampaignConfig, regeneration: int) -> list[str]:
    """The skill of each slot in this regeneration (round-robin over the active skills)."""
    d = cfg.designer
    return slot_skills(active_skills(d.skills, regeneration, d.active_skills), d.envs_per_round)


def new_attempts(
    attempt: int,
    open_slots: list[int],
    documents: list[Document],
    cfg: CampaignConfig,
    memory: EnvironmentMemory,
    regeneration: int,
) -> list[DesignAttempt]:
    """The prompts of attempt ``attempt`` for the still-open slots, by ``designer.strategy``
    (:meth:`~spade.designer.strategies.base.Strategy.prepare`; parents, directives and memory
    examples seeded per regeneration, attempt and slot, so a re-run builds the same prompts).
    An edit or splice slot with no parent in the memory (or, for splice, one without a
    ``setup`` hook to continue) is written instead."""
    d = cfg.designer
    strategy = strategy_for(d.strategy)
    skills = slot_plan(cfg, regeneration)
    tool_use = d.mode == "tool_use"
    max_words = cfg.corpus.max_words_tool_use if tool_use else cfg.corpus.max_words_games
    out = []
    for slot in open_slots:
        doc = documents[attempt * d.envs_per_round + slot]
        rng = random.Random(f"{cfg.seed}:{d.seed}:{regeneration}:{attempt}:{slot}")
        att = DesignAttempt(
            slot=slot, attempt=attempt, skill=skills[slot], doc_id=doc.doc_id, messages=[]
        )
        at = Slot(doc.truncated(max_words).text, skills[slot], tool_use, rng, memory, d)
        if not strategy.prepare(att, at):  # no parent to vary: the slot is written instead
            WRITE.prepare(att, at)
        out += [att] + [
            dataclasses.replace(copy.deepcopy(att), sample=i) for i in range(1, d.samples_per_slot)
        ]
    return out


def open_slots_of(batch: Sequence[DesignAttempt]) -> list[int]:
    """The slots of ``batch`` none of whose samples was accepted, in order."""
    won = {a.slot for a in batch if a.accepted}
    return sorted({a.slot for a in batch} - won)


async def generate(backend: Backend, batch: list[DesignAttempt], cfg: CampaignConfig) -> None:
    """One completion per attempt, extracted into code (or a parse/inference failure):
    attempts whose strategy samples them its own way first (scaffold), then one design request
    for each of the others, all in one batch, then their strategies' follow-ups (splice);
    InferenceError past ``designer.max_failed_share`` of failed requests."""
    for strategy, own in _by_strategy(batch):
        if not strategy.whole_answer:
            await strategy.sample(backend, own, cfg)
    whole = [a for a in batch if strategy_for(a.strategy).whole_answer]
    completions = await backend.complete([_request(a.messages, a, cfg) for a in whole])
    for att, comp in zip(whole, completions, strict=True):
        att.completion, att.model = comp.text, comp.model
        att.prompt_token_ids, att.token_ids, att.logprobs = (
            comp.prompt_token_ids,
            comp.token_ids,
            comp.logprobs,
        )
        _take_code(att, comp)
    for strategy, own in _by_strategy(whole):
        await strategy.complete(backend, own, cfg)
    check_failed_share(batch, cfg.designer.max_failed_share, "design")


def _by_strategy(batch: Sequence[DesignAttempt]) -> list[tuple[Strategy, list[DesignAttempt]]]:
    """The attempts of ``batch`` by their strategy, in order of each strategy's first one."""
    groups: dict[str, list[DesignAttempt]] = {}
    for att in batch:
        groups.setdefault(att.strategy, []).append(att)
    return [(strategy_for(name), attempts) for name, attempts in groups.items()]


def check_failed_share(batch: Sequence[DesignAttempt], max_share: float, what: str) -> None:
    """InferenceError when more than ``max_share`` of the ``batch`` (the attempts whose request
    ``what`` just answered) failed on our side: too many to trust the rest of the batch."""
    failed = [a for a in batch if a.failed]
    if not failed or len(failed) <= max_share * len(batch):
        return
    raise InferenceError(
        f"{len(failed)} of {len(batch)} {what} requests failed on the inference side (share"
        f" {len(failed) / len(batch):.2f} > designer.max_failed_share {max_share}), e.g."
        f" {failed[0].failure_reason}"
    )


def _request(
    messages: Sequence[dict[str, Any]], att: DesignAttempt, cfg: CampaignConfig
) -> ChatRequest:
    """A design request: the designer's sampling, with the attempt's prefill and stops."""
    d = cfg.designer
    params = SamplingParams(
        max_tokens=d.max_tokens, temperature=d.temperature, stop=tuple(att.stop)
    )
    return ChatRequest(messages, params, prefill=att.prefill)


def _take_code(att: DesignAttempt, comp: Completion) -> None:
    """The code in an answer (the first one, or a repair turn's), as its strategy reads it
    (:meth:`~spade.designer.strategies.base.Strategy.take_code`); or the inference failure."""
    if comp.failure is not None:
        att.failure_kind, att.failure_reason = INFERENCE, _failure_text(comp)
        return
    strategy_for(att.strategy).take_code(att, comp.text)


def _failure_text(comp: Completion) -> str:
    failure = comp.failure
    return failure.summary if failure is not None else ""


def verify_design(
    code: str,
    cfg: CampaignConfig,
    policy: SandboxPolicy,
    references: Sequence[dict[str, str]] = (),
    waive: Sequence[str] = (),
) -> Verdict:
    """The verifier's verdict on one design (every check that executes code runs in the jail);
    ``references`` (``{"name", "code"}``) are the designs it must not copy; ``waive``: checks
    waived beyond the config's ``sandbox.verify.waive`` (an imported pool's). With
    ``designer.static_gate`` a design the static gate rejects never reaches the jail."""
    refs = [Reference(r["name"], r["code"]) for r in references]
    config = cfg.sandbox.verify
    if waive:
        config = config.model_copy(update={"waive": sorted({*config.waive, *waive})})
    return verify(
        code, config=config, policy=policy, references=refs, gate=cfg.designer.static_gate
    )


def awaiting_verdict(batch: Sequence[DesignAttempt]) -> list[DesignAttempt]:
    """The attempts whose (first or repaired) code has not been verified yet, in order."""
    return [a for a in batch if a.code is not None and a.verdict is None]


def apply_verdict(att: DesignAttempt, verdict: Verdict) -> None:
    """Record the verifier's verdict on the attempt (accepted, or the failure and its check,
    with the last lines of its traceback)."""
    failed = verdict.rejecting_check
    traceback = failed.traceback if failed is not None else None
    att.verdict = verdict.to_dict() | {
        "failed_check": verdict.failed_check,
        "seconds": verdict.seconds,
        "traceback": _tail(traceback) if traceback else None,
    }
    att.tool_use, att.solution = verdict.tool_use, list(verdict.solution)
    att.accepted = verdict.accepted
    if verdict.failure is not None:
        att.failure_kind, att.failure_reason = str(verdict.failure.kind), verdict.failure.reason


def _keep_verdict(att: DesignAttempt, before: DesignAttempt) -> None:
    """Give ``att`` the verdict ``before`` had on the same code."""
    att.verdict, att.accepted = before.verdict, before.accepted
    att.tool_use, att.solution = before.tool_use, before.solution
    att.failure_kind, att.failure_reason = before.failure_kind, before.failure_reason


def _tail(traceback: str) -> str:
    return "\n".join(traceback.rstrip().splitlines()[-TRACEBACK_LINES:])


async def _verify_pending(
    batch: list[DesignAttempt], cfg: CampaignConfig, policy: SandboxPolicy
) -> None:
    """Verify every attempt of ``batch`` awaiting a verdict, ``sandbox.workers`` at a time."""
    gate = asyncio.Semaphore(cfg.sandbox.workers)
    pending = awaiting_verdict(batch)

    async def one(att: DesignAttempt) -> Verdict:
        async with gate:
            return await asyncio.to_thread(
                verify_design, att.code or "", cfg, policy, att.references
            )

    for att, verdict in zip(pending, await asyncio.gather(*map(one, pending)), strict=True):
        apply_verdict(att, verdict)


def needs_repair(att: DesignAttempt) -> bool:
    """A design rejected with code, or an answer with text but no usable module (not one that
    failed on our side: it stops there; nor one of a strategy that is never repaired)."""
    if att.accepted or att.failed or not strategy_for(att.strategy).repairable(att):
        return False
    if att.code is not None:
        return att.verdict is not None
    return att.failure_kind == "parse" and bool(att.last_answer.strip())


def repair_feedback(att: DesignAttempt) -> str:
    """The user turn telling the designer why its newest answer was rejected (a splice is
    asked for its corrected methods, the others for the whole corrected module)."""
    return strategy_for(att.strategy).repair_feedback(att)


async def repair_designs(
    backend: Backend, batch: list[DesignAttempt], cfg: CampaignConfig
) -> list[DesignAttempt]:
    """One repair turn for every attempt of ``batch`` that :func:`needs_repair`: the
    conversation so far plus the verifier's named failure, answered with a whole module that
    becomes the attempt's code (verify it next). Returns the repaired attempts. A repair whose
    request failed on our side leaves the attempt as it was, marked failed (left out of
    scoring); InferenceError past ``designer.max_failed_share`` of the turn's requests."""
    todo = [a for a in batch if needs_repair(a)]
    if not todo:
        return []
    feedback = [{"role": "user", "content": repair_feedback(a)} for a in todo]
    conversations = [
        [
            *a.messages,
            {"role": "assistant", "content": a.prefill + a.completion},
            *_answered(a.repair_messages, a.prefill),
            f,
        ]
        for a, f in zip(todo, feedback, strict=True)
    ]
    completions = await backend.complete(
        [_request(c, a, cfg) for c, a in zip(conversations, todo, strict=True)]
    )
    for att, turn, comp in zip(todo, feedback, completions, strict=True):
        if comp.failure is not None:  # no answer: the outcome is unknown, not this code's
            att.failure_kind, att.failure_reason = INFERENCE, f"repair: {_failure_text(comp)}"
            continue
        if not att.repair_messages:  # the first repair: keep what the first answer was
            att.first_code = att.code
            att.first_failure_kind, att.first_failure_reason = att.failure_kind, att.failure_reason
            att.first_progress = float((att.verdict or {}).get("progress") or 0.0)
        att.repair_messages += [turn, {"role": "assistant", "content": comp.text}]
        before = copy.copy(att)
        att.code = att.env_id = att.failure_kind = att.failure_reason = None
        att.verdict, att.accepted, att.tool_use, att.solution = None, False, False, []
        _take_code(att, comp)
        if att.code is not None and att.code == before.code:  # nothing changed: the verifier is
            _keep_verdict(att, before)  # deterministic, its verdict stands (no second run)
    check_failed_share(todo, cfg.designer.max_failed_share, "repair")
    return todo


def _answered(messages: list[dict[str, Any]], prefill: str) -> list[dict[str, Any]]:
    """A repair conversation's turns with each assistant answer whole (its prefill first)."""
    return [
        m | {"content": prefill + m["content"]} if m["role"] == "assistant" else m for m in messages
    ]


async def design_batch(
    backend: Backend,
    corpus: Corpus,
    memory: EnvironmentMemory,
    cfg: CampaignConfig,
    policy: SandboxPolicy,
    *,
    regeneration: int = 0,
) -> list[DesignAttempt]:
    """All attempts of one regeneration's slots, in order of (attempt, slot), verified,
    repaired and hinted: the round flow runs the same steps as separate stages."""
    documents = round_documents(corpus, cfg, regeneration)
    attempts: list[DesignAttempt] = []
    open_slots = list(range(cfg.designer.envs_per_round))
    for attempt in range(cfg.designer.attempts_per_slot):
        if not open_slots:
            break
        batch = new_attempts(attempt, open_slots, documents, cfg, memory, regeneration)
        await generate(backend, batch, cfg)
        await _verify_pending(batch, cfg, policy)
        for _ in range(cfg.designer.repair_turns):
            if not await repair_designs(backend, batch, cfg):
                break
            await _verify_pending(batch, cfg, policy)
        attempts += batch
        open_slots = open_slots_of(batch)
    await audit_designs([a for a in attempts if a.accepted], backend, cfg)
    await hint_designs([a for a in attempts if a.accepted], backend, cfg)
    return attempts
