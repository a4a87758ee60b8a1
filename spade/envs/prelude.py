"""The prelude: names a design finds bound before its first line runs, imported or not.

Small models forget imports (``NameError: TextEnv``, ``NameError: Callable``) far more often
than they get a game wrong, so the jail's session server binds these names in the design's
module before executing it: the contract's base classes, the ``typing`` names designs
annotate with, ``dataclass``/``field``, and the standard-library modules the designer's
contract promises, each under its own name. Every binding goes through the same import guard
as the design's own imports (a module comes as a guarded view), and only what the sandbox
policy's allow-list allows is bound. The design's own imports and definitions run afterwards,
so they win.

The reference implementation's loader injects more (``REFERENCE_NAMES``): its tool-use base
class ``ToolUseBaseEnv`` (:mod:`spade.envs.reference`), ``np``/``numpy`` and common names taken
from ``collections``, ``itertools``, ``functools``, ``copy`` and ``heapq``. Those are bound
only where a design's source names them (:func:`reference_bindings`): reference pools run
unchanged, importing numpy costs only the designs that use it, and this project's own prompts
and designs see the prelude above.

Standard library only, Python 3.11 compatible: the server imports this inside the jail, and
the host imports it for the static checks and to describe the prelude in prompts and docs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

# The standard-library modules the designer's contract lists as allowed imports.
PRELUDE_MODULES: tuple[str, ...] = (
    "math", "random", "re", "json", "itertools", "collections", "functools", "string",
    "dataclasses", "typing", "heapq", "bisect", "fractions", "statistics", "copy", "enum",
    "textwrap", "operator",
)  # fmt: skip

# Names bound from a module, as ``from module import name`` would. typing's aliases that
# share a name with a collections class (Counter, OrderedDict, ChainMap) are left out: a
# design that forgot ``from collections import Counter`` must not get typing's alias, which
# fails isinstance checks. ``dataclass`` and ``field`` are the two names designs take from
# ``dataclasses`` (state records, ``field(default_factory=list)``).
PRELUDE_NAMES: dict[str, tuple[str, ...]] = {
    "spade.envs": ("TextEnv", "ToolUseEnv", "ToolError"),
    "typing": (
        "Any", "Callable", "ClassVar", "Deque", "DefaultDict", "Dict", "FrozenSet",
        "Generator", "Iterable", "Iterator", "List", "Literal", "Mapping", "NamedTuple",
        "Optional", "Sequence", "Set", "Tuple", "Type", "TypeVar", "Union", "cast",
    ),
    "dataclasses": ("dataclass", "field"),
}  # fmt: skip


# The reference's injections beyond the prelude: modules under a name, then names from modules.
REFERENCE_MODULES: dict[str, str] = {"np": "numpy", "numpy": "numpy"}
REFERENCE_NAMES: dict[str, tuple[str, ...]] = {
    "spade.envs.reference": ("ToolUseBaseEnv",),
    "collections": ("deque", "defaultdict", "Counter", "OrderedDict", "namedtuple"),
    "itertools": ("combinations", "permutations", "product", "chain", "accumulate"),
    "functools": ("reduce", "lru_cache"),
    "copy": ("deepcopy",),
    "heapq": ("heappush", "heappop"),
}  # fmt: skip


def _allowed(module: str, allow: Iterable[str]) -> bool:
    """The sandbox policy's rule (``ImportPolicy.allows``): listed, or under a listed package."""
    return any(a == "*" or module == a or module.startswith(a + ".") for a in allow)


def prelude_bindings(allow: Iterable[str]) -> dict[str, tuple[str, str | None]]:
    """What the prelude binds under an import allow-list: ``name -> (module, attribute)``,
    the attribute ``None`` for a module bound under its own name. Modules the allow-list does
    not allow, and names from them, are left out."""
    allow = list(allow)
    out: dict[str, tuple[str, str | None]] = {
        m: (m, None) for m in PRELUDE_MODULES if _allowed(m, allow)
    }
    for module, names in PRELUDE_NAMES.items():
        if _allowed(module, allow):
            out.update({name: (module, name) for name in names})
    return out


def describe_prelude(allow: Iterable[str]) -> str:
    """One line per source of the prelude's names, for prompts and docs."""
    lines: dict[str, list[str]] = {}
    for name, (module, attr) in prelude_bindings(allow).items():
        lines.setdefault("modules" if attr is None else module, []).append(name)
    return "\n".join(
        f"{'import' if key == 'modules' else f'from {key} import'} {', '.join(names)}"
        for key, names in lines.items()
    )


def reference_bindings(
    allow: Iterable[str], used: Iterable[str]
) -> dict[str, tuple[str, str | None]]:
    """What is bound for a design that names ``used`` (the identifiers its source reads): the
    reference's injections among them that the allow-list allows, as :func:`prelude_bindings`
    gives them."""
    allow, used = list(allow), set(used)
    out: dict[str, tuple[str, str | None]] = {
        name: (module, None)
        for name, module in REFERENCE_MODULES.items()
        if name in used and _allowed(module, allow)
    }
    for module, names in REFERENCE_NAMES.items():
        if _allowed(module, allow):
            out.update({name: (module, name) for name in names if name in used})
    return out


def design_bindings(allow: Iterable[str], tree: ast.Module) -> dict[str, tuple[str, str | None]]:
    """Everything bound in a design's module before it runs (the jail's server binds it, the
    static checks reason about it): the prelude, and the reference's injections among the
    identifiers the design's source (``tree``) reads."""
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return prelude_bindings(allow) | reference_bindings(allow, used)
