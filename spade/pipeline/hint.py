"""The hint stage: a strategy hint for every accepted design, and the hints and descriptions of
environment files (the CLI's ``spade evaluate`` and the held-out stage share them).

A hint that leaks the solution is dropped; one lost to failed requests raises InferenceError
(see :mod:`spade.designer.hints`). Describing an environment (is it a tool-use task, does it
declare a hint, what is its solution) asks the jail: its code never runs on the host.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

from spade.config import CampaignConfig
from spade.curriculum.memory import UNKNOWN_SKILL, read_declarations
from spade.designer.designer import env_id_for, hint_designs
from spade.designer.solvability import audit_designs
from spade.inference.base import Backend
from spade.pipeline.context import RoundContext
from spade.pipeline.record import StageRecord
from spade.pipeline.stage import Stage
from spade.records import DesignAttempt, EnvSpec
from spade.sandbox.failures import EnvFailure
from spade.sandbox.policy import SandboxPolicy
from spade.sandbox.session import JailedSession


async def hint(
    ctx: RoundContext, attempts: list[DesignAttempt], backend: Backend
) -> list[DesignAttempt]:
    """A strategy hint for every accepted design (one that leaks the solution is dropped; one
    lost to failed requests raises InferenceError: see :mod:`spade.designer.hints`), after the
    optional solvability audit (``designer.solvability_check``), which may reject designs: the
    model reads the code here, as for the hint."""
    rec = StageRecord(ctx, "hint")
    attempts = copy.deepcopy(attempts)
    await audit_designs([a for a in attempts if a.accepted], backend, ctx.config)
    await hint_designs([a for a in attempts if a.accepted], backend, ctx.config)
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


def accepted_specs(attempts: list[DesignAttempt]) -> list[EnvSpec]:
    """The environments to evaluate: the accepted designs, in order, each once (two samples
    that wrote the same code are one environment)."""
    specs: dict[str, EnvSpec] = {}
    for a in attempts:
        if a.accepted and a.code is not None and a.env_id is not None:
            specs.setdefault(a.env_id, EnvSpec(a.env_id, a.code, a.skill, a.hint, a.tool_use))
    return list(specs.values())


def describe(code: str, policy: SandboxPolicy) -> tuple[bool, str | None]:
    """Whether an environment is a tool-use task, and its built-in hint (asks the jail)."""
    try:
        with JailedSession(code, policy=policy) as session:
            assert session.info is not None
            return session.info.tool_use, session.info.hint
    except EnvFailure:  # does not load: evaluation will record the failure on every play
        return False, None


def solution_of(code: str, policy: SandboxPolicy, cfg: CampaignConfig) -> list[str]:
    """The environment's solution on the verifier's instance, as the designer's hint step
    knows it from the verdict (asks the jail; empty when the code cannot give one)."""
    try:
        with JailedSession(
            code, policy=policy, env_kwargs={"max_turns": cfg.sandbox.verify.max_turns}
        ) as session:
            session.reset(cfg.sandbox.verify.seed)
            return session.solution()
    except EnvFailure:  # broken code: evaluation records the failure on every play
        return []


async def _generate_hints(
    backend: Backend, specs: list[EnvSpec], solutions: list[list[str]], cfg: CampaignConfig
) -> list[tuple[str | None, str | None]]:
    """``(hint, note)`` per spec from the designer's own hint step (same prompt, and a hint
    that spells out the solution is retried, then dropped), run on stand-in attempts."""
    attempts = [
        DesignAttempt(
            slot=i, attempt=0, skill=s.skill, doc_id="", messages=[], code=s.code,
            env_id=s.env_id, accepted=True, tool_use=s.tool_use, solution=solution,
        )
        for i, (s, solution) in enumerate(zip(specs, solutions, strict=True))
    ]  # fmt: skip
    await hint_designs(attempts, backend, cfg)
    return [(a.hint, a.hint_note) for a in attempts]


async def env_specs(
    paths: Sequence[Path], cfg: CampaignConfig, policy: SandboxPolicy, backend: Backend
) -> tuple[list[EnvSpec], list[str | None]]:
    """Specs for environment files: hint from ``<file>.hint.txt``, else the class's own
    ``hint``, else one the model writes; and per spec a note on why it has no hint."""
    specs: list[EnvSpec] = []
    notes: list[str | None] = []
    need_hint: list[int] = []
    for path in paths:
        code = path.read_text(encoding="utf-8")
        tool_use, builtin = describe(code, policy)
        sidecar = path.with_suffix(".hint.txt")
        hint = sidecar.read_text(encoding="utf-8").strip() if sidecar.is_file() else builtin
        skill = read_declarations(code).get("skill", UNKNOWN_SKILL)
        specs.append(EnvSpec(env_id_for(code), code, skill, hint, tool_use))
        notes.append(None)
        if not hint:
            need_hint.append(len(specs) - 1)
    if need_hint:
        todo = [specs[i] for i in need_hint]
        solutions = [solution_of(s.code, policy, cfg) for s in todo]
        hints = await _generate_hints(backend, todo, solutions, cfg)
        for i, (hint, note) in zip(need_hint, hints, strict=True):
            s = specs[i]
            specs[i] = EnvSpec(s.env_id, s.code, s.skill, hint, s.tool_use)
            notes[i] = note
    return specs, notes


STAGE = Stage(
    "hint",
    sections=("model", "designer"),
    entries=("hint", "spade.pipeline.replay:replay", "spade.inference.pool:shared_backend"),
)
