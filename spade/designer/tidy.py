"""Tidying a spliced module: bindings the model meant, and none of its parent's dead code.

A splice (:mod:`spade.designer.splice`) puts a model's methods into its parent's text; what the
methods read through ``self`` and what the parent's helpers read no longer match. These passes
fix what is plainly a binding, not logic (a module constant read as ``self._QUERY``), and drop
the parent's helpers nothing calls any more. Text and :mod:`ast` only: nothing is run.
"""

from __future__ import annotations

import ast

from spade.designer.inherit import ENV_BASES
from spade.pysource import PARSE_ERRORS, parse_module

HOOKS = ("setup", "play", "check_answer", "solution")
"""The contract's hooks, in the order an answer writes them (those the parent has)."""


def env_class(tree: ast.Module) -> ast.ClassDef | None:
    """The module's environment class: the first class on TextEnv/ToolUseEnv named ``*Env``."""
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name.endswith("Env")):
            continue
        if any(isinstance(b, ast.Name) and b.id in ENV_BASES for b in node.bases):
            return node
    return None


def methods_of(cls: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def self_attributes(node: ast.AST) -> tuple[set[str], list[str]]:
    """The ``self.<name>`` attributes under ``node``: ``(stored, loaded)``, loads in order of
    the walk with repeats."""
    stored: set[str] = set()
    loaded: list[str] = []
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            if isinstance(n.ctx, ast.Store):
                stored.add(n.attr)
            else:
                loaded.append(n.attr)
    return stored, loaded


def assigns(node: ast.stmt, name: str) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else []
    if isinstance(node, ast.AnnAssign):
        targets = [node.target]
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def alias_module_names(code: str) -> str:
    """``code`` with class-level aliases of the module's own constants and functions that the
    class reads through ``self`` and never assigns (the 1.5B coder's ``self._QUERY`` for the
    parent's module-level ``_QUERY`` regex; also spelled without its case or underscore), and
    ``self.random`` as the base's seeded ``self.rng`` (2 of 16 crashes of the 1.5B's
    splices): as :mod:`spade.designer.inherit` carries names over, a binding the model meant,
    not logic. Unchanged when it does not parse."""
    try:
        tree = parse_module(code)
    except PARSE_ERRORS:  # the verifier grades the syntax error
        return code
    cls = env_class(tree)
    if cls is None:
        return code
    own = {
        n.id
        for node in cls.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for n in ast.walk(node.targets[0] if isinstance(node, ast.Assign) else node.target)
        if isinstance(n, ast.Name)
    } | {m.name for m in methods_of(cls)}
    stored, loaded = self_attributes(cls)
    constants = {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    wanted = [n for n in dict.fromkeys(loaded) if n not in stored | own]
    spelled = {_spelling(n): n for n in sorted(constants | functions)}
    meant = {n: n if n in constants | functions else spelled.get(_spelling(n)) for n in wanted}
    aliases = [f"    {n} = {m}" for n, m in meant.items() if m in constants]
    aliases += [f"    {n} = staticmethod({m})" for n, m in meant.items() if m in functions]
    if "random" in wanted and "random" not in constants | functions:
        # self.random.randint(...): the generator the base seeds per episode (self.rng, a
        # random.Random) is what was meant; the module's random would not be seeded
        aliases.append("    random = property(lambda self: self.rng)")
    if not aliases:
        return code
    skill = next((n for n in cls.body if assigns(n, "skill")), None)  # splice() set it
    at = (skill.end_lineno or skill.lineno) if skill is not None else cls.body[0].lineno - 1
    lines = code.splitlines()
    lines[at:at] = ["    # names read through self that the module or the base binds", *aliases]
    return "\n".join(lines) + "\n"


def _spelling(name: str) -> str:
    """A name without case and leading underscores: ``self.query`` and ``self.INT`` for the
    module's ``_QUERY`` and ``_INT`` (the 0.5B coder's spellings of its parent's regexes)."""
    return name.lstrip("_").lower()


def drop_dead_helpers(code: str, written: set[str]) -> str:
    """``code`` without the parent's helper methods nothing calls any more (number_hunt's
    ``end`` reads the ``self.closest`` a new ``setup`` no longer assigns: dead code that
    describes the parent's game, and an AttributeError waiting for a caller). Hooks, tools,
    ``__init__``/dunders and the answer's own methods stay; unchanged when it does not parse."""
    while True:
        try:
            tree = parse_module(code)
        except PARSE_ERRORS:  # the verifier grades the syntax error; nothing is guessed
            return code
        cls = env_class(tree)
        if cls is None:
            return code
        used = {
            n.attr if isinstance(n, ast.Attribute) else n.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute | ast.Name)
        } | {
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        dead = [
            m
            for m in methods_of(cls)
            if m.name not in written
            and m.name not in HOOKS
            and not m.name.startswith(("tool_", "__"))
            and m.name not in used
        ]
        if not dead:
            return code
        lines = code.splitlines()
        for m in reversed(dead):
            start = min([m.lineno, *(d.lineno for d in m.decorator_list)]) - 1
            end = m.end_lineno or m.lineno
            end += end < len(lines) and not lines[end].strip()  # its blank line after
            del lines[start:end]
        code = "\n".join(lines) + "\n"
