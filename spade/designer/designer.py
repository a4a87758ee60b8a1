"""One batch of designs: prompt, generate, extract, verify in the sandbox, then hint.

Every attempt is recorded, accepted or not, with the reason it failed: rejected designs are
data (the designer is trained on them too). Slots whose attempt failed get a new document
and try again, up to ``attempts_per_slot``; attempts of all open slots go out as one batch.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from spade.config import CampaignConfig
from spade.curriculum.memory import EnvironmentMemory, negative_label
from spade.designer.corpus import Corpus, Document
from spade.designer.extract import clean_hint, extract_code, leaks_solution
from spade.designer.prompts import design_prompt, hint_prompt
from spade.designer.skills import active_skills, slot_skills
from spade.errors import DesignParseError
from spade.inference.base import Backend, ChatRequest, Completion, SamplingParams
from spade.sandbox.policy import SandboxPolicy
from spade.verify import Verdict, verify


def env_id_for(code: str) -> str:
    """Content address of a design: the same code is the same environment."""
    return "env-" + hashlib.sha256(code.encode("utf-8")).hexdigest()[:16]


@dataclass
class DesignAttempt:
    """One try at one slot: the prompt, the completion, and what became of it."""

    slot: int
    attempt: int
    skill: str
    doc_id: str
    messages: list[dict[str, Any]]
    completion: str = ""
    model: str = ""
    code: str | None = None
    env_id: str | None = None
    accepted: bool = False
    failure_kind: str | None = None  # inference, parse, or the verifier's failure kind
    failure_reason: str | None = None
    verdict: dict[str, Any] | None = None
    tool_use: bool = False
    solution: list[str] = field(default_factory=list)
    hint: str | None = None
    hint_note: str | None = None
    prompt_token_ids: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DesignAttempt:
        """Inverse of :meth:`to_dict`; other keys (a scored row's ``reward``, ...) are ignored."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


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
    """The prompts of attempt ``attempt`` for the still-open slots (memory examples seeded
    per regeneration, attempt and slot, so a re-run builds the same prompts)."""
    d = cfg.designer
    skills = slot_plan(cfg, regeneration)
    max_words = (
        cfg.corpus.max_words_tool_use if d.mode == "tool_use" else cfg.corpus.max_words_games
    )
    out = []
    for slot in open_slots:
        doc = documents[attempt * d.envs_per_round + slot]
        rng = random.Random(f"{cfg.seed}:{d.seed}:{regeneration}:{attempt}:{slot}")
        positives, negatives = memory.examples_for(skills[slot], rng, d)
        messages = design_prompt(
            doc.truncated(max_words).text,
            skills[slot],
            tool_use=d.mode == "tool_use",
            positives=positives,
            negatives=[(n, negative_label(n, d)) for n in negatives],
        )
        out.append(
            DesignAttempt(
                slot=slot, attempt=attempt, skill=skills[slot], doc_id=doc.doc_id, messages=messages
            )
        )
    return out


async def generate(backend: Backend, batch: list[DesignAttempt], cfg: CampaignConfig) -> None:
    """One completion per attempt, extracted into code (or a parse/inference failure)."""
    d = cfg.designer
    params = SamplingParams(max_tokens=d.max_tokens, temperature=d.temperature)
    completions = await backend.complete([ChatRequest(a.messages, params) for a in batch])
    for att, comp in zip(batch, completions, strict=True):
        _take_completion(att, comp)


def _take_completion(att: DesignAttempt, comp: Completion) -> None:
    att.completion, att.model = comp.text, comp.model
    att.prompt_token_ids, att.token_ids, att.logprobs = (
        comp.prompt_token_ids,
        comp.token_ids,
        comp.logprobs,
    )
    if comp.failure is not None:
        att.failure_kind, att.failure_reason = (
            "inference",
            f"{comp.failure.kind}: {comp.failure.reason}",
        )
        return
    try:
        att.code = extract_code(comp.text)
    except DesignParseError as exc:  # the model wrote no usable module: data
        att.failure_kind, att.failure_reason = "parse", str(exc)
        return
    att.env_id = env_id_for(att.code)


def verify_design(code: str, cfg: CampaignConfig, policy: SandboxPolicy) -> Verdict:
    """The verifier's verdict on one design (every check that executes code runs in the jail)."""
    return verify(code, config=cfg.sandbox.verify, policy=policy)


def apply_verdict(att: DesignAttempt, verdict: Verdict) -> None:
    """Record the verifier's verdict on the attempt (accepted, or the failure and its check)."""
    att.verdict = verdict.to_dict() | {
        "failed_check": verdict.failed_check,
        "seconds": verdict.seconds,
    }
    att.tool_use, att.solution = verdict.tool_use, list(verdict.solution)
    att.accepted = verdict.accepted
    if verdict.failure is not None:
        att.failure_kind, att.failure_reason = str(verdict.failure.kind), verdict.failure.reason


async def _verify_all(
    attempts: list[DesignAttempt], cfg: CampaignConfig, policy: SandboxPolicy
) -> list[Verdict]:
    gate = asyncio.Semaphore(cfg.sandbox.workers)

    async def one(code: str) -> Verdict:
        async with gate:
            return await asyncio.to_thread(verify_design, code, cfg, policy)

    return list(await asyncio.gather(*(one(a.code or "") for a in attempts)))


async def design_batch(
    backend: Backend,
    corpus: Corpus,
    memory: EnvironmentMemory,
    cfg: CampaignConfig,
    policy: SandboxPolicy,
    *,
    regeneration: int = 0,
) -> list[DesignAttempt]:
    """All attempts of one regeneration's slots, in order of (attempt, slot), verified and
    hinted: the round flow runs the same steps as separate stages."""
    documents = round_documents(corpus, cfg, regeneration)
    attempts: list[DesignAttempt] = []
    open_slots = list(range(cfg.designer.envs_per_round))
    for attempt in range(cfg.designer.attempts_per_slot):
        if not open_slots:
            break
        batch = new_attempts(attempt, open_slots, documents, cfg, memory, regeneration)
        await generate(backend, batch, cfg)
        parsed = [a for a in batch if a.code is not None]
        for att, verdict in zip(parsed, await _verify_all(parsed, cfg, policy), strict=True):
            apply_verdict(att, verdict)
        attempts += batch
        open_slots = [a.slot for a in batch if not a.accepted]
    await hint_designs([a for a in attempts if a.accepted], backend, cfg)
    return attempts


async def hint_designs(
    accepted: list[DesignAttempt], backend: Backend, cfg: CampaignConfig
) -> None:
    """Ask for a hint per accepted design, of at most ``designer.hint_max_sentences``
    sentences; an empty hint or one that spells out the solution is asked again, up to
    ``designer.hint_tries`` requests, then dropped (the design is then evaluated without hinted
    plays)."""
    d = cfg.designer
    params = SamplingParams(max_tokens=d.hint_max_tokens, temperature=d.hint_temperature)
    todo = list(accepted)
    for _ in range(d.hint_tries):
        if not todo:
            return
        completions = await backend.complete(
            [ChatRequest(hint_prompt(a.code or "", d.hint_max_sentences), params) for a in todo]
        )
        retry = []
        for att, comp in zip(todo, completions, strict=True):
            hint = clean_hint(comp.text, d.hint_max_sentences) if comp.ok else ""
            solution = att.solution
            if not hint:
                att.hint_note = (
                    "empty hint" if comp.ok else f"hint generation failed: {comp.failure}"
                )
                retry.append(att)
            elif leaks_solution(hint, solution):
                att.hint_note = "hint revealed the solution"
                retry.append(att)
            else:
                att.hint, att.hint_note = hint, None
        todo = retry
