"""The design and evaluate stages end to end, for the CLI (the Prefect flows compose the same
pieces stage by stage). Results are written as plain files: JSON lines, code, hints."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spade.agent.evaluate import EnvEvaluation, EnvSpec, evaluate_envs
from spade.config import CampaignConfig
from spade.curriculum.memory import EnvironmentMemory, read_declarations
from spade.curriculum.pool import seed_records
from spade.designer.corpus import Corpus
from spade.designer.designer import DesignAttempt, design_batch, env_id_for, hint_designs
from spade.inference.base import Backend
from spade.inference.factory import open_backend
from spade.sandbox.failures import EnvFailure
from spade.sandbox.policy import SandboxPolicy, load_policy
from spade.sandbox.session import JailedSession

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )


def load_memory(cfg: CampaignConfig) -> EnvironmentMemory:
    memory = EnvironmentMemory(cfg.memory)
    memory.extend(seed_records(cfg))
    return memory


async def run_design(
    cfg: CampaignConfig, out: Path, *, regeneration: int = 0, progress: Progress = _quiet
) -> list[DesignAttempt]:
    """Design one batch; write ``attempts.jsonl``, ``envs/<id>.py`` (+ ``.hint.txt``), config."""
    policy = load_policy(cfg.sandbox.policy_path)
    corpus = Corpus.load(cfg.corpus)
    memory = load_memory(cfg)
    progress(f"corpus: {len(corpus)} documents; memory: {len(memory)} designs")
    async with open_backend(cfg) as backend:
        progress(f"model: {backend.model_name}")
        attempts = await design_batch(
            backend, corpus, memory, cfg, policy, regeneration=regeneration
        )
    envs = out / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(cfg.resolved_yaml(), encoding="utf-8")
    _write_jsonl(out / "attempts.jsonl", [a.to_dict() for a in attempts])
    for a in attempts:
        if a.accepted and a.code and a.env_id:
            (envs / f"{a.env_id}.py").write_text(a.code, encoding="utf-8")
            if a.hint:
                (envs / f"{a.env_id}.hint.txt").write_text(a.hint + "\n", encoding="utf-8")
    return attempts


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
        skill = read_declarations(code).get("skill", "unknown")
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


async def run_evaluate(
    cfg: CampaignConfig, paths: Sequence[Path], out: Path | None, *, progress: Progress = _quiet
) -> list[EnvEvaluation]:
    """Hinted and unhinted plays of environment files; optionally written to ``out``."""
    policy = load_policy(cfg.sandbox.policy_path)
    async with open_backend(cfg) as backend:
        specs, notes = await env_specs(paths, cfg, policy, backend)
        for path, note in zip(paths, notes, strict=True):
            if note:
                progress(f"{path.name}: no hint ({note}), so no hinted plays")
        n = len(specs) * (cfg.evaluation.unhinted_plays + cfg.evaluation.hinted_plays)
        progress(f"model: {backend.model_name}; playing up to {n} episodes")
        results = await evaluate_envs(backend, specs, cfg, policy)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(cfg.resolved_yaml(), encoding="utf-8")
        _write_jsonl(
            out / "evaluations.jsonl",
            [
                r.summary() | {"path": str(p), "hint": s.hint, "hint_note": note}
                for r, p, s, note in zip(results, paths, specs, notes, strict=True)
            ],
        )
        _write_jsonl(
            out / "trajectories.jsonl", [t.to_dict() for r in results for t in r.trajectories]
        )
    return results


__all__ = ["env_specs", "load_memory", "run_design", "run_evaluate"]
