"""What each stage's result depends on: the config it reads, the files that config names and
the code it runs.

A stage's cache key is built from these (plus its data inputs), so a change to the training
config does not re-run the design stage, and a change to the verifier's code re-runs verify and
what follows it, not the design before it. The code is computed, not listed: the ``spade``
modules its entry functions' modules import, transitively (:func:`stage_closure`), and the
jail's runtime for a stage that runs sessions. The files are digested by contents
(:mod:`spade.pipeline.inputs`): a stage whose sections hold a path-valued field (the sandbox
policy, the corpus, the held-out and pool environments, the seed pool, a local model) is keyed
on what the file holds, not only on its name.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spade.config import CampaignConfig
from spade.pipeline.inputs import FILE_FIELDS, pool_drawn
from spade.storage.version import (
    SPADE_ROOT,
    clear_import_cache,
    files_digest,
    module_closure,
    module_path,
)

STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    "sample_documents": ("seed", "corpus", "designer"),
    "design": ("seed", "model", "corpus", "designer", "memory"),
    "verify": ("sandbox",),
    "hint": ("model", "designer"),
    "pool": (
        "seed",
        "model",
        "designer",
        "sandbox",
        "run.env_source",
        "run.env_pool",
        "run.min_envs",
        "run.heldout_envs",
    ),
    "evaluate": ("seed", "model", "evaluation", "scoring", "sandbox.policy_path"),
    "score": ("scoring", "evaluation"),
    "memory": ("memory",),
    "train_agent": ("seed", "model", "training"),
    "train_designer": ("seed", "model", "training"),
    "publish": ("model", "training"),
    "heldout": (
        "model",
        "evaluation",
        "sandbox.policy_path",
        "run.heldout_envs",
        "run.heldout_suites",
        "run.heldout_plays",
    ),
}
"""Config fields each stage's result depends on, top-level or dotted (``inference``,
``storage`` and ``metrics`` are where work runs or is reported, not what it computes, so they
are in no key)."""

_INFERENCE = "spade.inference.pool:shared_backend"  # the model a task's backend serves
STAGE_ENTRIES: dict[str, tuple[str, ...]] = {
    "sample_documents": (
        "spade.pipeline.documents:sample_documents",
        "spade.pipeline.pool:skip_design",
    ),
    "design": ("spade.pipeline.design:design", "spade.pipeline.design:repair", _INFERENCE),
    "verify": (
        "spade.pipeline.verify:verify",
        "spade.pipeline.verify:settle",
        "spade.pipeline.pool:verify_pool_env",
    ),
    "hint": ("spade.pipeline.hint:hint", "spade.pipeline.replay:replay", _INFERENCE),
    "pool": (
        "spade.pipeline.pool:fill",
        "spade.pipeline.pool:needs_model",
        "spade.pipeline.pool:replay",
        "spade.pipeline.pool:skip",
        _INFERENCE,
    ),
    "evaluate": (
        "spade.pipeline.evaluate:evaluate_env",
        "spade.pipeline.evaluate:commit_evaluations",
        _INFERENCE,
    ),
    "score": ("spade.pipeline.score:score_round",),
    "memory": ("spade.pipeline.memory:remember",),
    "train_agent": ("spade.pipeline.train:train", "spade.pipeline.train:skip_training"),
    "train_designer": ("spade.pipeline.train:train", "spade.pipeline.train:skip_role"),
    "publish": ("spade.pipeline.publish:publish",),
    "heldout": ("spade.pipeline.heldout:heldout",),
}
"""The ``spade`` functions (``module:function``) each stage's Prefect tasks call (the flows'
tests check this against ``flows/``); a stage's code is every module their modules import."""

JAIL_RUNTIME: tuple[str, ...] = ("sandbox/server.py", "__init__.py", "envs")
"""What :mod:`spade.sandbox.jail` mounts into every jail (paths under the ``spade`` folder):
run there, never imported on the host, so no import reaches it; it is part of the code of every
stage that runs sessions (:func:`runs_sessions`)."""

SESSION_MARK = "policy"
"""A stage runs sessions when one of its entry functions reads this (``ctx.policy``, the round's
sandbox policy): a jail needs the policy."""

KEY_MODULES: tuple[str, ...] = (
    "spade.pipeline.keys",
    "spade.pipeline.inputs",
    "spade.storage.version",
)
"""The cache-key machinery: imported by every stage (through :mod:`spade.pipeline.record`), it
decides which result is reused, not what a result is, so it is in no stage's closure (were it
followed, its lazy imports of the readers it digests for would put them in every stage)."""


def stage_closure(stage: str, root: Path = SPADE_ROOT) -> frozenset[str]:
    """The ``spade`` modules ``stage`` runs on the host: its entry modules' import closure."""
    return _closures(root)[stage]


@functools.cache
def _closures(root: Path) -> dict[str, frozenset[str]]:
    return {
        stage: module_closure((e.partition(":")[0] for e in entries), root, KEY_MODULES)
        for stage, entries in STAGE_ENTRIES.items()
    }


def runs_sessions(stage: str, root: Path = SPADE_ROOT) -> bool:
    """Whether one of ``stage``'s entry functions names :data:`SESSION_MARK` (``ctx.policy``);
    ValueError for an entry function its module does not define."""
    found = False
    for entry in STAGE_ENTRIES[stage]:
        module, _, func = entry.partition(":")
        path = module_path(module, root)
        tree = ast.parse(path.read_bytes()) if path is not None else ast.Module([], [])
        defs = [
            n
            for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == func
        ]
        if not defs:
            raise ValueError(f"stage {stage}: no function {entry} under {root}")
        names = {n.id for n in ast.walk(defs[0]) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(defs[0]) if isinstance(n, ast.Attribute)}
        found = found or SESSION_MARK in names
    return found


def stage_sources(stage: str, root: Path = SPADE_ROOT) -> list[tuple[str, Path]]:
    """``(name, file)`` of every source behind ``stage``: its closure's modules, sorted, then
    the jail's runtime files when it runs sessions."""
    closure = stage_closure(stage, root)
    named = [(m, path) for m in sorted(closure) if (path := module_path(m, root)) is not None]
    if runs_sessions(stage, root):
        for rel in JAIL_RUNTIME:
            top = root / rel
            files = sorted(top.rglob("*.py")) if top.is_dir() else [top]
            named += [(f"jail:{f.relative_to(root).as_posix()}", f) for f in files]
    return named


@functools.cache
def stage_code_versions(root: Path = SPADE_ROOT) -> dict[str, str]:
    """Every stage's code version, computed once per process (the code it has loaded)."""
    return {stage: files_digest(stage_sources(stage, root)) for stage in STAGE_ENTRIES}


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_hash(cfg: CampaignConfig, stage: str) -> str:
    """Hash of the config sections ``stage`` depends on and of the contents of the files they
    name (16 hex chars); ConfigError for a named file that is missing."""
    dump = cfg.model_dump(mode="json")
    sections = STAGE_SECTIONS[stage]
    return _digest(
        {
            "config": {name: _field(dump, name) for name in sections},
            "files": {f: FILE_FIELDS[f](cfg) for f in stage_file_fields(stage, cfg)},
        }
    )


READ_WHEN: dict[tuple[str, str], Callable[[CampaignConfig], bool]] = {
    ("pool", "run.heldout_envs"): pool_drawn,  # left out of a draw; a skip reads nothing
}
"""``(stage, field)``: a stage that reads a file only under a condition (default: always)."""


def stage_file_fields(stage: str, cfg: CampaignConfig | None = None) -> list[str]:
    """The path-valued fields (:data:`FILE_FIELDS`) in ``stage``'s config sections, less those
    it does not read under ``cfg`` (:data:`READ_WHEN`; all of them without a config)."""
    sections = STAGE_SECTIONS[stage]
    return [
        f
        for f in FILE_FIELDS
        if any(f == s or f.startswith(s + ".") for s in sections)
        and (cfg is None or READ_WHEN.get((stage, f), lambda _: True)(cfg))
    ]


def _field(dump: dict[str, Any], dotted: str) -> Any:
    node: Any = dump
    for key in dotted.split("."):
        node = node[key]
    return node


def stage_code_version(stage: str) -> str:
    """Hash of the source files ``stage`` runs (16 hex chars; :func:`stage_sources`)."""
    return stage_code_versions()[stage]


def clear_caches() -> None:
    """Forget the closures and code versions computed so far (a test that edits sources)."""
    _closures.cache_clear()
    stage_code_versions.cache_clear()
    clear_import_cache()


def fingerprint(obj: Any) -> str:
    """A stable hash of JSON-able data (inputs of a stage that are not config)."""
    return _digest(obj)
