"""An edit keeps what it does not rewrite: module-level names of the parent the edit uses.

The edit strategy (ACCEL's level editing) mutates a whole, working parent. Small models rewrite
the parent's class and leave out the lines above it, then the class fails on a constant or
helper it still uses (``NameError: _QUERY`` was the 0.5B coder's most common crash, in both the
design bench and the demo). Such an answer is an edit that changed the class and kept the rest,
so the parent's module-level definitions the edit uses but does not bind are carried over into
its code, as the prelude carries the contract's names: help that costs the model nothing.

Only parsed with :mod:`ast`, never run: the completed module is verified in the jail like any
other. The environment classes of the parent are never carried over (the edit has its own), nor
``from __future__`` imports (they must open a module).
"""

from __future__ import annotations

import ast
import builtins

from spade.pysource import PARSE_ERRORS, parse_module

_BUILTINS = frozenset(dir(builtins))
ENV_BASES = frozenset({"TextEnv", "ToolUseEnv"})


def inherit_missing(code: str, parent: str, parent_name: str = "parent") -> tuple[str, list[str]]:
    """``code`` completed with the parent's module-level definitions it uses and lacks.

    A statement of the parent is carried over when it binds a name the edit loads but never
    binds at its top level, and so are the statements those need in turn (a compiled regex
    needs ``import re``). They keep the parent's order and text and go after the edit's leading
    docstring and imports, under a comment naming the parent.

    Returns:
        ``(code, names)``: the completed code and the names carried over, in the parent's
        order; ``(code, [])`` unchanged when nothing is missing or either module does not parse
        (the verifier names a syntax error; nothing is guessed).
    """
    try:
        tree, ptree = parse_module(code), parse_module(parent)
    except PARSE_ERRORS:  # not ours to report: the parse check names it
        return code, []
    bound = _top_level_bound(tree)
    wanted = _loaded(tree) - bound - _BUILTINS
    providers = _providers(ptree)
    chosen: set[int] = set()
    while True:  # carry a statement over, then what it needs, until nothing new is needed
        new = {i for name in wanted for i in providers.get(name, ())} - chosen
        if not new:
            break
        chosen |= new
        taken = set().union(*(_binds(ptree.body[i]) for i in chosen))
        wanted = set().union(*(_loaded(ptree.body[i]) for i in new)) - bound - taken - _BUILTINS
    if not chosen:
        return code, []
    order = sorted(chosen)
    names = [n for i in order for n in sorted(_binds(ptree.body[i]))]
    lines = parent.splitlines()
    block = [f"# carried over from {parent_name}, whose class this edits: {', '.join(names)}"]
    for i in order:
        node = ptree.body[i]
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        block += lines[start - 1 : node.end_lineno]
    at = _header_end(tree)
    own = code.splitlines()
    return "\n".join([*own[:at], *block, "", *own[at:]]) + "\n", names


def _providers(tree: ast.Module) -> dict[str, list[int]]:
    """Name -> indices of the parent's top-level statements that bind it (carryable ones)."""
    out: dict[str, list[int]] = {}
    for i, node in enumerate(tree.body):
        if _carryable(node):
            for name in _binds(node):
                out.setdefault(name, []).append(i)
    return out


def _carryable(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.module != "__future__"
    if isinstance(node, ast.ClassDef):  # helper classes yes, the environment itself no
        return not any(isinstance(b, ast.Name) and b.id in ENV_BASES for b in node.bases)
    return isinstance(
        node,
        ast.Import | ast.Assign | ast.AnnAssign | ast.FunctionDef | ast.AsyncFunctionDef,
    )


def _binds(node: ast.stmt) -> set[str]:
    """Names one top-level statement binds."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _top_level_bound(tree: ast.Module) -> set[str]:
    return set().union(*(_binds(node) for node in tree.body))


def _loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _header_end(tree: ast.Module) -> int:
    """The line after the module's leading docstring and imports (0: there are none)."""
    end = 0
    for i, node in enumerate(tree.body):
        docstring = (
            i == 0
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        )
        if not (docstring or isinstance(node, ast.Import | ast.ImportFrom)):
            break
        end = node.end_lineno or end
    return end
