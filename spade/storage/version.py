"""Code versions for cache keys: a hash of the source files of the modules a stage runs.

:func:`module_closure` finds those modules by reading sources, never importing them: every
``spade`` module reached by static imports from a stage's entry modules, transitively.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
from collections.abc import Iterable
from pathlib import Path

PACKAGE = "spade"
SPADE_ROOT = Path(__file__).resolve().parents[1]
"""The ``spade`` package folder whose sources are hashed (a test passes an edited copy)."""


def _source_path(name: str) -> Path:
    try:  # find_spec imports the parent packages (light), never the module itself
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:  # a parent package missing, or a bad name
        raise ValueError(f"no module {name}: {exc}") from exc
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise ValueError(f"no Python source for module {name}")
    return Path(spec.origin)


def code_version(*modules: str) -> str:
    """First 16 hex chars of the sha256 of the named modules' source files.

    The files are read, never imported: ``spade.sandbox.server`` is the in-jail server, which
    must not run on the host (importing it would point this process's stdout at stderr).
    Modules are hashed once each, in the order given; ValueError for a module without a
    Python source file (built-in, compiled, missing) or for no module at all.
    """
    if not modules:
        raise ValueError("code_version needs at least one module name")
    return files_digest((name, _source_path(name)) for name in dict.fromkeys(modules))


def files_digest(named: Iterable[tuple[str, Path]]) -> str:
    """First 16 hex chars of the sha256 over ``(name, file contents)`` pairs, in order."""
    h = hashlib.sha256()
    for name, path in named:
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def module_path(name: str, root: Path = SPADE_ROOT) -> Path | None:
    """The source file of ``spade`` module ``name`` under ``root``, or None when there is none."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = root.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def module_closure(
    entries: Iterable[str], root: Path = SPADE_ROOT, skip: Iterable[str] = ()
) -> frozenset[str]:
    """Every ``spade`` module the ``entries`` modules reach by imports, transitively, them
    included; the modules in ``skip`` are neither included nor followed.

    Imports anywhere count (module level and inside functions: a lazy import runs when the
    stage does), and so does a string literal that names a ``spade`` module (what
    ``importlib.import_module`` is given, e.g. :mod:`spade.benchmarks.base`'s suite table). Not
    counted: imports under ``if TYPE_CHECKING:`` (that code never runs, so it cannot change a
    result), and a package's ``__init__`` reached only as the parent of an imported submodule
    (``from spade.verify.checks import X`` runs ``spade/verify/__init__.py``, but uses none of
    its names; spade's package ``__init__`` files re-export names and set
    ``OMP_WAIT_POLICY``, a speed setting). A module that uses a package's own names imports
    the package, and so reaches its ``__init__``. ValueError for an entry without a source.
    """
    todo = list(entries)
    for name in todo:
        if module_path(name, root) is None:
            raise ValueError(f"no source for entry module {name} under {root}")
    skipped = set(skip)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [m for m in _imported(name, root) if m not in seen | skipped]
    return frozenset(seen)


@functools.lru_cache(maxsize=4096)
def _imported(name: str, root: Path) -> tuple[str, ...]:
    """The ``spade`` modules that module ``name`` imports at run time (parsed once per root)."""
    path = module_path(name, root)
    assert path is not None  # only names with a source are asked about
    tree = ast.parse(path.read_bytes(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    here = name if is_pkg else name.rpartition(".")[0]  # what a relative import starts from
    found: list[str] = []
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, here)
            found.append(base)  # a module, or a package whose names are used
            found += [f"{base}.{a.name}" for a in node.names]  # a submodule, or just a name
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
    return tuple(m for m in found if module_path(m, root) is not None)


def clear_import_cache() -> None:
    """Forget the parsed imports (a test that edits sources)."""
    _imported.cache_clear()


def _absolute(node: ast.ImportFrom, here: str) -> str:
    if not node.level:
        return node.module or ""
    parts = here.split(".")
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def _runtime_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:`` blocks."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo += node.orelse  # the else branch does run
            continue
        todo += ast.iter_child_nodes(node)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )
