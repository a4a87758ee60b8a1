"""Cache keys follow what a stage really runs and reads: its import closure (computed from the
sources) and the contents of the files its config names. Editing one of them changes exactly
the keys of the stages that depend on it (issue 12, finding 'stale cache')."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
from pathlib import Path

import pytest

from spade.config import load_config
from spade.errors import ConfigError
from spade.pipeline import inputs, keys
from spade.pipeline.stage import declared_in
from spade.storage import STAGES
from spade.storage.version import SPADE_ROOT, module_closure

REPO = SPADE_ROOT.parent
TRAINING = {"train_agent", "train_designer", "publish"}


def _config(tmp_path: Path, **more: object):
    tmp_path.mkdir(parents=True, exist_ok=True)
    policy = tmp_path / "policy.yaml"
    shutil.copy(REPO / "infra" / "sandbox.yaml", policy)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "one document about locked doors"}\n{"text": "another"}\n')
    held = tmp_path / "held"
    held.mkdir()
    shutil.copy(SPADE_ROOT / "envs" / "examples" / "number_hunt.py", held / "hunt.py")
    overrides = {
        "sandbox.policy_path": str(policy),
        "corpus.path": str(corpus),
        "run.heldout_envs": [str(held)],
        **more,
    }
    return load_config(overrides=overrides), policy, corpus, held / "hunt.py"


def _keys(cfg) -> dict[str, str]:
    return {s: keys.config_hash(cfg, s) for s in STAGES}


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {s for s in before if before[s] != after[s]}


@pytest.mark.attack
def test_editing_a_file_a_stage_reads_changes_exactly_the_dependent_keys(tmp_path):
    cfg, policy, corpus, held = _config(tmp_path)
    base = _keys(cfg)
    assert _keys(cfg) == base  # stable
    policy.write_text(policy.read_text() + "\n# tightened\n")
    after_policy = _keys(cfg)
    assert _changed(base, after_policy) == {"verify", "pool", "evaluate", "heldout"}
    corpus.write_text(corpus.read_text().replace("another", "another, edited"))
    after_corpus = _keys(cfg)
    assert _changed(after_policy, after_corpus) == {"sample_documents", "design"}
    held.write_text(held.read_text() + "\n# fixed\n")
    after_held = _keys(cfg)
    assert _changed(after_corpus, after_held) == {"heldout"}  # the pool is not drawn
    drawn = cfg.model_copy(update={"run": cfg.run.model_copy(update={"min_envs": 2})})
    before_drawn = _keys(drawn)
    held.write_text(held.read_text() + "# fixed again\n")
    assert _changed(before_drawn, _keys(drawn)) == {"pool", "heldout"}  # left out of the draw


def test_a_local_model_and_a_seed_pool_are_keyed_by_contents(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    seeds = tmp_path / "seeds"
    shutil.copytree(SPADE_ROOT / "envs" / "examples", seeds)
    cfg, *_ = _config(
        tmp_path, **{"model.name_or_path": str(model), "memory.seed_pool": str(seeds)}
    )
    base = _keys(cfg)
    (model / "config.json").write_text('{"edited": true}')
    after_model = _keys(cfg)
    model_stages = {s for s in STAGES if "model.name_or_path" in keys.stage_file_fields(s)}
    assert _changed(base, after_model) == model_stages
    assert model_stages == {"design", "hint", "pool", "evaluate", "heldout"} | TRAINING
    (seeds / "maze_walk.py").write_text("# edited\n")
    assert _changed(after_model, _keys(cfg)) == {"design", "memory"}


def test_the_pool_folder_counts_only_when_the_pool_is_drawn(tmp_path):
    pool = tmp_path / "pool"
    shutil.copytree(SPADE_ROOT / "envs" / "examples", pool)
    off, *_ = _config(tmp_path / "a", **{"run.env_pool": str(pool)})
    on, *_ = _config(tmp_path / "b", **{"run.env_pool": str(pool), "run.min_envs": 2})
    before_off, before_on = _keys(off), _keys(on)
    (pool / "maze_walk.py").write_text("# edited\n")
    assert _changed(before_off, _keys(off)) == set()
    assert _changed(before_on, _keys(on)) == {"pool"}


def test_a_missing_file_is_a_clear_error_not_a_key(tmp_path):
    cfg, policy, corpus, held = _config(tmp_path)
    policy.unlink()
    with pytest.raises(ConfigError, match=re.escape("sandbox.policy_path")):
        keys.config_hash(cfg, "verify")
    assert keys.config_hash(cfg, "score")  # a stage that does not read it is unaffected
    cfg, policy, corpus, held = _config(tmp_path / "x")
    held.unlink()
    held.parent.rmdir()
    with pytest.raises(ConfigError, match=re.escape("run.heldout_envs")):
        keys.config_hash(cfg, "heldout")
    corpus.unlink()
    with pytest.raises(ConfigError, match=re.escape("corpus.path")):
        keys.config_hash(cfg, "sample_documents")


def test_a_folder_digest_covers_names_and_contents_in_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "b" / "c.txt").write_text("y")
    first = inputs.path_digest(tmp_path, "f")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.pyc").write_bytes(b"\0")
    assert inputs.path_digest(tmp_path, "f") == first  # Python's bytecode cache is not input
    (tmp_path / "a.txt").rename(tmp_path / "z.txt")
    assert inputs.path_digest(tmp_path, "f") != first  # a rename is a change


def test_every_path_valued_config_field_is_read_or_declared_not_read():
    from pydantic import BaseModel

    from spade.config import CampaignConfig

    def fields(model: type[BaseModel], prefix: str = "") -> list[str]:
        out = []
        for name, info in model.model_fields.items():
            ann = info.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                out += fields(ann, f"{prefix}{name}.")
            elif "str" in str(ann) or "Path" in str(ann):  # could name a file
                out.append(f"{prefix}{name}")
        return out

    names = fields(CampaignConfig)
    looks_like_a_path = {
        n
        for n in names
        if any(w in n.rsplit(".", 1)[-1] for w in ("path", "dir", "file", "root", "pool", "envs"))
    }
    # inference is where work runs (an executable, a host), in no stage's key
    looks_like_a_path -= {n for n in names if n.startswith("inference.")}
    assert looks_like_a_path == set(inputs.FILE_FIELDS) | set(inputs.NOT_READ)
    assert set(inputs.FILE_FIELDS).isdisjoint(inputs.NOT_READ)


def test_drifted_modules_are_in_the_closures_of_the_stages_that_run_them():
    for stage in ("train_agent", "train_designer"):
        closure = keys.stage_closure(stage)
        for m in ("run", "engines", "weights", "checkpoint", "trainer", "loss", "samples"):
            assert f"spade.training.{m}" in closure, (stage, m)
    for m in ("session", "jail", "policy"):
        assert f"spade.sandbox.{m}" in keys.stage_closure("verify"), m
    assert {"spade.benchmarks.bfcl", "spade.benchmarks.humaneval"} <= keys.stage_closure("heldout")
    everything = set().union(*(keys.stage_closure(s) for s in STAGES))
    for unused in ("spade.cli.env", "spade.dashboard.charts", "spade.preflight", "spade.sandbox"):
        assert unused not in everything, unused
    assert not set(keys.KEY_MODULES) & everything  # the key machinery is no stage's code
    assert {s for s in STAGES if keys.runs_sessions(s)} == {"verify", "evaluate", "heldout"}


@pytest.mark.attack
def test_editing_a_module_changes_exactly_the_stages_whose_closure_holds_it(tmp_path):
    root = tmp_path / "spade"
    shutil.copytree(SPADE_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    base = keys.stage_code_versions(root)
    assert base == keys.stage_code_versions()  # the copy is the same code

    def edit(rel: str) -> set[str]:
        path = root / rel
        path.write_text(path.read_text() + "\n# edited\n")
        keys.clear_caches()
        after = keys.stage_code_versions(root)
        return _changed(base, after)

    # publish (its own module) runs no update: the loss is not in its code
    assert edit("training/loss.py") == TRAINING - {"publish"}
    base = keys.stage_code_versions(root)
    assert edit("pipeline/score.py") == {"score"}
    base = keys.stage_code_versions(root)
    assert edit("pipeline/memory.py") == {"memory"}
    base = keys.stage_code_versions(root)
    assert edit("sandbox/server.py") == {"verify", "evaluate", "heldout"}  # the jail runtime
    base = keys.stage_code_versions(root)
    assert edit("cli/env.py") == set()


def test_closure_rules_on_a_small_package(tmp_path):
    pkg = tmp_path / "spade"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "sub/__init__.py": "import spade.never_imported_by_a\n",
        "a.py": (
            "from typing import TYPE_CHECKING\n"
            "from .sub import b\n"
            "if TYPE_CHECKING:\n    import spade.typing_only\nelse:\n    import spade.c\n"
            "def f():\n    from spade.sub.lazy import x\n"
            "TABLE = {'k': 'spade.dynamic'}\n"
        ),
        "sub/b.py": "",
        "sub/lazy.py": "x = 1\n",
        "c.py": "",
        "dynamic.py": "",
        "typing_only.py": "",
        "never_imported_by_a.py": "",
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    closure = module_closure(["spade.a"], pkg)
    # `from .sub import b` uses the package's names: its __init__ counts (and what it imports)
    assert closure == {
        "spade.a",
        "spade.sub",
        "spade.sub.b",
        "spade.never_imported_by_a",
        "spade.c",
        "spade.sub.lazy",
        "spade.dynamic",
    }
    with pytest.raises(ValueError, match="no source"):
        module_closure(["spade.nope"], pkg)


def test_jail_runtime_is_what_the_jail_mounts():
    from spade.sandbox.jail import _runtime_mounts

    mounted = {Path(m.src).resolve() for m in _runtime_mounts()}
    assert mounted == {(SPADE_ROOT / rel).resolve() for rel in keys.JAIL_RUNTIME}


def _flow_calls() -> dict[str, set[str]]:
    """``stage -> {"module:function"}`` of the spade functions each cached task of flows/ calls."""
    out: dict[str, set[str]] = {}
    for path in sorted((REPO / "flows").glob("*.py")):
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}  # local name -> "module" or "module:function"
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spade"):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    is_module = (SPADE_ROOT.parent / (sub.replace(".", "/") + ".py")).is_file()
                    aliases[a.asname or a.name] = sub if is_module else f"{node.module}:{a.name}"
        for node in ast.walk(tree):  # t.run(stage_function, ...): a declared stage's generic task
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "run" and node.args:
                name = _spade_name(node.args[0], aliases)
                if name is not None:
                    out.setdefault(_declaring_stage(name), set()).add(name)
        for fn in tree.body:
            if not isinstance(fn, ast.AsyncFunctionDef | ast.FunctionDef):
                continue
            stage = _cached_stage(fn)
            if stage is None:
                continue
            calls = out.setdefault(stage, set())
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):  # fn(...), or asyncio.to_thread(fn, ...)
                    named = (_spade_name(e, aliases) for e in [node.func, *node.args[:1]])
                    calls |= {n for n in named if n is not None}
    return out


def _declaring_stage(entry: str) -> str:
    """The name of the stage whose module declares ``module:function`` as its ``run``."""
    module, _, func = entry.partition(":")
    stages = declared_in(importlib.import_module(module))
    return next(s.name for s in stages if s.run is not None and s.run.__name__ == func)


def _spade_name(expr: ast.expr, aliases: dict[str, str]) -> str | None:
    """``module:function`` for ``alias.function`` or an imported ``function``, else None."""
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        module = aliases.get(expr.value.id, ":")
        return None if ":" in module else f"{module}:{expr.attr}"
    if isinstance(expr, ast.Name) and ":" in aliases.get(expr.id, ""):
        return aliases[expr.id]
    return None


def _cached_stage(fn: ast.AsyncFunctionDef | ast.FunctionDef) -> str | None:
    for dec in fn.decorator_list:
        for kw in dec.keywords if isinstance(dec, ast.Call) else []:
            v = kw.value
            if kw.arg == "cache_policy" and isinstance(v, ast.Call) and v.args:
                arg = v.args[0]
                return arg.value if isinstance(arg, ast.Constant) else None
    return None


def test_stage_entries_are_what_the_flows_tasks_call():
    calls = _flow_calls()
    # train_designer's training runs in the shared `train` task (cached under train_agent)
    calls["train_designer"] |= {"spade.pipeline.train:train"}
    want = {s: set(e) for s, e in keys.STAGE_ENTRIES.items()}
    # pool_phase calls needs_model inside fill_pool: already in calls
    assert calls == want


def test_a_remote_corpus_is_keyed_by_the_stores_content_identifiers():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/keys-corpus/docs.jsonl", b'{"text": "one"}\n')
    cfg = load_config(overrides={"corpus.path": "memory://keys-corpus/docs.jsonl"})
    before = keys.config_hash(cfg, "sample_documents")
    fs.pipe("/keys-corpus/docs.jsonl", b'{"text": "one, edited"}\n')
    try:
        assert keys.config_hash(cfg, "sample_documents") != before
        fs.rm("/keys-corpus", recursive=True)
        with pytest.raises(ConfigError, match=re.escape("corpus.path")):
            keys.config_hash(cfg, "design")
    finally:
        if fs.exists("/keys-corpus"):
            fs.rm("/keys-corpus", recursive=True)
