"""The design and evaluate stages end to end, for the CLI (the Prefect flows compose the same
pieces stage by stage). Results are written as plain files: JSON lines, code, hints."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spade.agent.evaluate import EnvEvaluation, EnvSpec, evaluate_envs
from spade.config import CampaignConfig
from spade.curriculum.memory import EnvironmentMemory, import_pool, read_declarations
from spade.designer.corpus import Corpus
from spade.designer.designer import DesignAttempt, design_batch, env_id_for
from spade.designer.extract import clean_hint
from spade.designer.prompts import hint_prompt
from spade.inference.base import Backend, ChatRequest, SamplingParams
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
    if cfg.memory.seed_pool:
        memory.extend(import_pool(cfg.memory.seed_pool, cfg.memory))
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


async def _generate_hints(
    backend: Backend, codes: list[str], cfg: CampaignConfig
) -> list[str | None]:
    params = SamplingParams(
        max_tokens=cfg.designer.hint_max_tokens, temperature=cfg.designer.hint_temperature
    )
    completions = await backend.complete([ChatRequest(hint_prompt(c), params) for c in codes])
    return [clean_hint(c.text) or None if c.ok else None for c in completions]


async def env_specs(
    paths: Sequence[Path], cfg: CampaignConfig, policy: SandboxPolicy, backend: Backend
) -> list[EnvSpec]:
    """Specs for environment files: hint from ``<file>.hint.txt``, else the class's own
    ``hint``, else one the model writes."""
    specs: list[EnvSpec] = []
    need_hint: list[int] = []
    for path in paths:
        code = path.read_text(encoding="utf-8")
        tool_use, builtin = describe(code, policy)
        sidecar = path.with_suffix(".hint.txt")
        hint = sidecar.read_text(encoding="utf-8").strip() if sidecar.is_file() else builtin
        skill = read_declarations(code).get("skill", "unknown")
        specs.append(EnvSpec(env_id_for(code), code, skill, hint, tool_use))
        if not hint:
            need_hint.append(len(specs) - 1)
    if need_hint:
        hints = await _generate_hints(backend, [specs[i].code for i in need_hint], cfg)
        for i, hint in zip(need_hint, hints, strict=True):
            s = specs[i]
            specs[i] = EnvSpec(s.env_id, s.code, s.skill, hint, s.tool_use)
    return specs


async def run_evaluate(
    cfg: CampaignConfig, paths: Sequence[Path], out: Path | None, *, progress: Progress = _quiet
) -> list[EnvEvaluation]:
    """Hinted and unhinted plays of environment files; optionally written to ``out``."""
    policy = load_policy(cfg.sandbox.policy_path)
    async with open_backend(cfg) as backend:
        specs = await env_specs(paths, cfg, policy, backend)
        n = len(specs) * (cfg.evaluation.unhinted_plays + cfg.evaluation.hinted_plays)
        progress(f"model: {backend.model_name}; playing up to {n} episodes")
        results = await evaluate_envs(backend, specs, cfg, policy)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(cfg.resolved_yaml(), encoding="utf-8")
        _write_jsonl(
            out / "evaluations.jsonl",
            [r.summary() | {"path": str(p)} for r, p in zip(results, paths, strict=True)],
        )
        _write_jsonl(
            out / "trajectories.jsonl", [t.to_dict() for r in results for t in r.trajectories]
        )
    return results


__all__ = ["env_specs", "load_memory", "run_design", "run_evaluate"]
