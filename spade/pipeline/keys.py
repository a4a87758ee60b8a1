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
from spade.storage import STAGES
from spade.storage.version import (
    SPADE_ROOT,
    clear_import_cache,
    files_digest,
    module_closure,
    module_path,
)

PIPELINE = SPADE_ROOT / "pipeline"


def read_stages(folder: Path = PIPELINE) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """``name -> (config sections, entry functions)`` of every stage the modules in ``folder``
    declare (``STAGE = Stage(...)``, or a tuple of them: :class:`spade.pipeline.stage.Stage`),
    read from the source, not imported (the stage modules import this one). An entry is
    ``module:function``; a bare name and ``run`` name a function of the declaring module.
    ValueError for a declaration that is not literal or a stage declared twice."""
    stages: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for path in sorted(folder.glob("*.py")):
        module = f"spade.pipeline.{path.stem}"
        for call in _declarations(ast.parse(path.read_bytes()), path):
            name, sections, entries = _stage_of(call, module, path)
            if name in stages:
                raise ValueError(f"{path}: stage {name!r} is declared twice")
            stages[name] = (sections, entries)
    return stages


def _declarations(tree: ast.Module, path: Path) -> list[ast.Call]:
    """The ``Stage(...)`` calls assigned to the module's ``STAGE``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["STAGE"]:
            calls = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            if not all(isinstance(c, ast.Call) and ast.unparse(c.func) == "Stage" for c in calls):
                raise ValueError(f"{path}: STAGE must be Stage(...) or a tuple of them")
            return calls  # type: ignore[return-value]
    return []


def _stage_of(
    call: ast.Call, module: str, path: Path
) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    fields = dict(zip(("name", "sections", "entries", "run"), call.args, strict=False))
    fields |= {kw.arg: kw.value for kw in call.keywords if kw.arg is not None}
    try:  # literal values only: this is read from the source, never run
        name = ast.literal_eval(fields["name"])
        sections = tuple(ast.literal_eval(fields["sections"]))
        entries = list(ast.literal_eval(fields["entries"])) if "entries" in fields else []
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{path}: a Stage declaration needs literal values ({exc})") from None
    if "run" in fields:
        entries.insert(0, ast.unparse(fields["run"]))
    return name, sections, tuple(e if ":" in e else f"{module}:{e}" for e in entries)


_DECLARED = read_stages()
STAGE_SECTIONS: dict[str, tuple[str, ...]] = {n: s for n, (s, _) in _DECLARED.items()}
"""Config fields each stage's result depends on, top-level or dotted, as its module declares
them (``inference``, ``storage`` and ``metrics`` are where work runs or is reported, not what
it computes, so they are in no key)."""

STAGE_ENTRIES: dict[str, tuple[str, ...]] = {n: e for n, (_, e) in _DECLARED.items()}
"""The ``spade`` functions (``module:function``) each stage's Prefect tasks call, as its module
declares them (the flows' tests check this against ``flows/``); a stage's code is every module
their modules import."""

EXTRA_STAGES: tuple[str, ...] = tuple(n for n in _DECLARED if n not in STAGES)
"""Declared stages that are not the store's built-in ones: every campaign store the pipeline
opens knows them (:func:`spade.pipeline.record.campaign_store`), after the built-in ones."""


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
