"""Static checks of a design's source: it parses, and it stays inside the import policy.

Pure analysis of the syntax tree; nothing is executed. The same policy is enforced again at
runtime inside the jail, and the jail contains whatever slips past both.
"""

from __future__ import annotations

import ast

from spade.sandbox.failures import Failure, FailureKind
from spade.sandbox.policy import ImportPolicy

_ATTR_CALLS = {"getattr", "setattr", "delattr", "hasattr"}


def parse_source(code: str, max_bytes: int) -> ast.Module | Failure:
    """The module's syntax tree, or a SYNTAX failure saying why not."""
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return Failure(
            FailureKind.SYNTAX, f"source is {size} bytes, over the {max_bytes}-byte limit"
        )
    try:
        return ast.parse(code, filename="env.py")
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


def import_violations(tree: ast.Module, policy: ImportPolicy) -> list[str]:
    """Imports outside the allow-list, as ``'name (line N)'``."""
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
    return sorted(set(bad))


def _module_aliases(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


def name_violations(tree: ast.Module, policy: ImportPolicy) -> list[str]:
    """Forbidden builtins, escape attributes and private module attributes, with lines."""
    forbidden_names = set(policy.forbidden_names) | set(policy.forbidden_attributes)
    forbidden_attrs = set(policy.forbidden_attributes)
    modules = _module_aliases(tree)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in forbidden_names:
            bad.append(f"name {node.id!r} (line {node.lineno})")
        elif isinstance(node, ast.Attribute):
            if node.attr in forbidden_attrs:
                bad.append(f"attribute {node.attr!r} (line {node.lineno})")
            elif (
                node.attr.startswith("_")
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
            ):
                bad.append(f"private attribute {node.value.id}.{node.attr} (line {node.lineno})")
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
