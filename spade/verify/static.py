"""Static checks of a design's source: it parses, and it stays inside the import policy.

Pure analysis of the syntax tree; the design is never executed here. The import policy is
defence in depth, not a boundary: the jail (namespaces, seccomp, rlimits, an explicit mount
list) is the only barrier, and nothing may rely on these checks for safety. They read names
written in the source: ``getattr(object, "__sub" + "classes__")()`` computes its name, walks
to ``os._wrap_close.__init__.__globals__`` (the os module) in four lines and passes them
(``tests/sandbox/attacks/host/reach_os_globals.py``; the jail contains what it then tries).
They make the easy routes fail early, with a reason the designer can act on. The same policy
is enforced again at runtime by the jail's import guard, which the same walk sidesteps.

Allowed modules hold other modules as attributes (``random._os``, ``typing.sys``,
``dataclasses.builtins``), so checking import statements alone would let a design reach any
module through an allowed one. :func:`module_table` asks the jail's own interpreter which
attributes of each allowed module are modules (they differ between Python versions), and
:func:`import_violations` flags private names taken from a module and any from-import or
attribute chain rooted at an imported name that yields a module outside the allow-list.
Modules of the prelude (:mod:`spade.envs.prelude`) count as imported under their own names, and
so do the reference's injected modules (``np``) where the source names them. The probe sees the
directories the policy's ``SPADE_SEARCH_PATH`` appends in the jail (Debian's numpy, the jail's
site folder with math_verify).
Aliasing through assignments (``t = typing; t.sys``) is not followed here; the runtime guard
hands the design views of modules that refuse those attributes too.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import spade
from spade.envs.prelude import design_bindings
from spade.errors import SandboxError
from spade.pysource import PARSE_ERRORS, parse_module
from spade.records import Failure, FailureKind
from spade.sandbox.policy import ImportPolicy, SandboxPolicy

_ATTR_CALLS = {"getattr", "setattr", "delattr", "hasattr"}
# Dunder names a design may read from a module (the runtime guard in server.py has the same).
PUBLIC_DUNDERS = frozenset({"__name__", "__doc__", "__all__", "__version__"})
_RUNTIME_PARENT = Path(spade.__file__).resolve().parents[1]  # where ``spade.envs`` resolves

# Run by the jail's interpreter with -I -S (the jail runs it with -s -S): it imports the
# allowed modules only (the standard library and our spade.envs runtime), never a design.
_PROBE = """
import importlib, json, sys, types
allow = json.loads(sys.argv[1])
sys.path.insert(0, sys.argv[2])
sys.path += json.loads(sys.argv[3])
def allowed(n):
    return any(n == a or n.startswith(a + ".") for a in allow)
table, todo = {}, []
for name in allow:
    try:
        todo.append(importlib.import_module(name))
    except Exception:  # not importable in the jail either
        pass
while todo:
    m = todo.pop()
    if m.__name__ in table:
        continue
    attrs = {k: v for k, v in vars(m).items() if isinstance(v, types.ModuleType)}
    star = getattr(m, "__all__", None)
    star = [k for k in attrs if (k in star if star is not None else not k.startswith("_"))]
    table[m.__name__] = {"attrs": {k: v.__name__ for k, v in attrs.items()}, "star": star}
    todo += [v for v in attrs.values() if allowed(v.__name__)]
print(json.dumps(table))
"""


@dataclass(frozen=True)
class ModuleInfo:
    """One allowed module's attributes that hold modules, as the jail's interpreter sees it."""

    attrs: Mapping[str, str] = field(default_factory=dict)  # attribute -> module name
    star: frozenset[str] = frozenset()  # those of them that ``from M import *`` binds


ModuleTable = Mapping[str, ModuleInfo]


@functools.cache
def _probe(interpreter: Path, allow: tuple[str, ...], search: tuple[str, ...]) -> ModuleTable:
    argv = [str(interpreter), "-I", "-S", "-c", _PROBE, json.dumps(allow), str(_RUNTIME_PARENT)]
    argv.append(json.dumps(search))
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:  # no usable jail interpreter: set-up
        raise SandboxError(f"cannot list module attributes with {interpreter}: {exc}") from exc
    return {
        name: ModuleInfo(dict(entry["attrs"]), frozenset(entry["star"]))
        for name, entry in json.loads(out).items()
    }


def module_table(policy: SandboxPolicy) -> ModuleTable:
    """Module-valued attributes of every allowed module (and of the allowed modules reachable
    from them), from the policy's interpreter: computed once per interpreter, allow-list and
    search path, so the table always matches the Python that runs designs."""
    allow = tuple(sorted(a for a in policy.imports.allow if a != "*"))
    return _probe(policy.interpreter, allow, policy.search_path)


_NOT_A_STATEMENT_START = (" ", "\t", "\r", "\n", "#", ")", "]", "}")


def _parses(code: str) -> bool:
    try:
        parse_module(code)
    except PARSE_ERRORS:  # what does not parse
        return False
    return True


def parsed_share(code: str) -> float:
    """Share of ``code``'s lines in its longest prefix that parses, cut where a top-level
    statement starts: how far the parser got through a module with a syntax error or cut off
    in the middle (graded designer rewards tell such designs apart with it). 1.0 when all of
    it parses, 0.0 for empty code.

    A binary search over the cut points, assuming a prefix parses when a longer one does (true
    of top-level statements; a line at column 0 inside a string can break it, and then the
    share is an underestimate): ``log2(statements)`` parses, never one per prefix, so a
    design-supplied string costs the host ``O(n log n)``.
    """
    lines = code.splitlines(keepends=True)
    if not lines:
        return 0.0
    cuts = [i for i, line in enumerate(lines) if i and not line.startswith(_NOT_A_STATEMENT_START)]
    cuts.append(len(lines))
    lo, hi = -1, len(cuts) - 1  # cuts[lo] parses (-1: the empty prefix), find the last one
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _parses("".join(lines[: cuts[mid]])):
            lo = mid
        else:
            hi = mid - 1
    return 0.0 if lo < 0 else cuts[lo] / len(lines)


def parse_source(code: str, max_bytes: int) -> ast.Module | Failure:
    """The module's syntax tree, or a SYNTAX failure saying why not."""
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return Failure(
            FailureKind.SYNTAX, f"source is {size} bytes, over the {max_bytes}-byte limit"
        )
    try:
        return parse_module(code, filename="env.py")
    except SyntaxError as exc:
        return Failure(FailureKind.SYNTAX, f"line {exc.lineno}: {exc.msg}")
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, absurd nesting
        return Failure(FailureKind.SYNTAX, f"source cannot be parsed: {type(exc).__name__}: {exc}")


def _imported_modules(tree: ast.Module) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            name = "." * node.level + (node.module or "")
            if node.level == 0 and node.module:
                out += [
                    (f"{node.module}.{a.name}", node.lineno) for a in node.names if a.name != "*"
                ]
            out.append((name, node.lineno))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and name not in PUBLIC_DUNDERS


_NAMED_BINDERS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.ExceptHandler,
    ast.MatchAs,
    ast.MatchStar,
)


def own_names(tree: ast.Module) -> set[str]:
    """Names the design binds itself, anywhere, other than by importing them."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, _NAMED_BINDERS) and node.name:  # def, class, except/match "as"
            names.add(node.name)
    return names


class _Reach:
    """What a design takes out of modules: private names and module-valued attributes."""

    def __init__(self, tree: ast.Module, policy: ImportPolicy, table: ModuleTable) -> None:
        self.policy, self.table = policy, table
        # A name bound by an import (or by the prelude) -> the module it denotes. A prelude
        # module counts unless the design binds that name itself (``random = ...``).
        own = own_names(tree)
        prelude = design_bindings(policy.allow, tree)
        self.bound: dict[str, str] = {
            name: module
            for name, (module, attr) in prelude.items()
            if attr is None and name not in own
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:  # ``import a.b`` binds ``a``; ``import a.b as c``, a.b
                    name = a.name if a.asname else a.name.split(".")[0]
                    self.bound[a.asname or name] = name
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for a in node.names:
                    if target := self.attr_module(node.module, a.name):
                        self.bound[a.asname or a.name] = target

    def attr_module(self, module: str, attr: str) -> str | None:
        """The module that ``module.attr`` holds, if it holds one."""
        info = self.table.get(module)
        if info is not None and attr in info.attrs:
            return info.attrs[attr]
        return f"{module}.{attr}" if f"{module}.{attr}" in self.table else None

    def module_of(self, node: ast.expr) -> str | None:
        """The module an expression denotes: an imported name or an attribute chain on one."""
        if isinstance(node, ast.Name):
            return self.bound.get(node.id)
        if isinstance(node, ast.Attribute) and (owner := self.module_of(node.value)):
            return self.attr_module(owner, node.attr)
        return None

    def taking(self, module: str, attr: str) -> str | None:
        """Why taking ``attr`` from ``module`` is denied, or None."""
        if _private(attr):
            return "private to its module"
        target = self.attr_module(module, attr)
        if target is not None and not self.policy.allows(target):
            return f"the module {target!r}, not allowed"
        return None

    def violations(self, tree: ast.Module) -> Iterator[str]:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                info = self.table.get(node.module, ModuleInfo())
                for a in node.names:
                    for name in sorted(info.star) if a.name == "*" else [a.name]:
                        if why := self.taking(node.module, name):
                            yield f"{node.module}.{name} (line {node.lineno}): {why}"
            elif isinstance(node, ast.Attribute) and (owner := self.module_of(node.value)):
                if why := self.taking(owner, node.attr):
                    yield f"{owner}.{node.attr} (line {node.lineno}): {why}"
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in _ATTR_CALLS
                and len(node.args) >= 2
                and (owner := self.module_of(node.args[0]))
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and (why := self.taking(owner, node.args[1].value))
            ):
                yield f"{owner}.{node.args[1].value} (line {node.lineno}): {why}"


def import_violations(
    tree: ast.Module, policy: ImportPolicy, table: ModuleTable | None = None
) -> list[str]:
    """Imports outside the allow-list, as ``'name (line N)'``. With a :func:`module_table`,
    also private names and disallowed modules taken from allowed modules, as ``'module.name
    (line N): why'``."""
    bad = []
    for name, line in _imported_modules(tree):
        if name.startswith("."):
            bad.append(f"{name} (line {line}): relative imports are not allowed")
            continue
        top_allowed = policy.allows(name)
        parent = name.rsplit(".", 1)[0]
        # ``from spade.envs import TextEnv`` yields "spade.envs.TextEnv": allowed via parent.
        if not top_allowed and not ("." in name and policy.allows(parent)):
            bad.append(f"{name} (line {line})")
    if table is not None and "*" not in policy.allow:
        bad += _Reach(tree, policy, table).violations(tree)
    return sorted(set(bad))


def name_violations(tree: ast.Module, policy: ImportPolicy) -> list[str]:
    """Forbidden builtins and escape attributes, with lines (private names taken from modules
    are :func:`import_violations`)."""
    forbidden_names = set(policy.forbidden_names) | set(policy.forbidden_attributes)
    forbidden_attrs = set(policy.forbidden_attributes)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in forbidden_names:
            bad.append(f"name {node.id!r} (line {node.lineno})")
        elif isinstance(node, ast.Attribute) and node.attr in forbidden_attrs:
            bad.append(f"attribute {node.attr!r} (line {node.lineno})")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ATTR_CALLS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("__")
        ):
            bad.append(f"{node.func.id}(..., {node.args[1].value!r}) (line {node.lineno})")
    return sorted(set(bad))
