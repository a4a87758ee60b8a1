"""A static gate run on a design's source before the jail: milliseconds, nothing executed.

Starting a jail costs ~90 ms and a verifier run seconds; many designs of small models fail on
mistakes plain to see in the source: it does not parse, ``play`` returns two values, a method
reads ``self.board`` that nothing assigns, a forgotten import (``NameError: Fraction``), or an
edit that hands its parent back renamed. :func:`gate` finds those with ``ast`` and the
standard library's ``symtable`` (analysis only: the design is never executed, compiled or
imported here) and returns the :class:`~spade.records.Failure` the jailed verifier would give,
with the same kind, so a caller can skip the jail for it. Each check's :class:`Finding` also
says where the jail would meet the failure (the method that runs it, the line), which grades
how far a rejected design got. It only rejects what it is sure of:
anything it cannot follow (returns of calls, ``setattr``, star imports, bases defined
elsewhere) passes and is left to the verifier.

The checks (:data:`GATE_CHECKS`), in order, and the kinds they give: ``parses`` (syntax),
``hook_arity`` (crash: ``play``/``check_answer``; contract: ``setup``), ``self_attributes``
(crash: AttributeError), ``bare_names`` (crash: NameError), ``near_copy`` (duplicate).

It is not a safety boundary: a design that passes here is as untrusted as before, and runs
only in the jail.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import symtable
import tokenize
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

from spade.config import VerifyConfig
from spade.envs import base
from spade.envs.prelude import design_bindings
from spade.pysource import PARSE_ERRORS
from spade.records import Failure, FailureKind
from spade.verify.novelty import near_verbatim, source_tokens
from spade.verify.static import parse_source

_DEFAULTS = VerifyConfig()
_BASES = {"TextEnv": False, "ToolUseEnv": True}  # our base classes -> tool use
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (*_FUNCTIONS, ast.Lambda, ast.ClassDef)
_CATCHERS = {"AttributeError", "Exception", "BaseException"}  # handlers that catch it
# What a module's namespace holds before its first line runs (the jail's loader sets __file__).
_MODULE_NAMES = frozenset(dir(builtins)) | {
    "__name__", "__doc__", "__file__", "__package__", "__loader__", "__spec__",
    "__builtins__", "__annotations__", "__module__", "__qualname__",
}  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """What a gate check found: the failure the jail would give, the method whose run meets
    it (``"module"`` for module level; None where no run does, as for syntax) and its line."""

    failure: Failure
    method: str | None = None
    line: int | None = None


@dataclass
class Design:
    """What the gate's checks share: the source, the settings and what was parsed."""

    code: str
    parent: str | None = None
    parent_name: str = "parent"
    max_similarity: float = _DEFAULTS.max_similarity
    max_tokens: int = _DEFAULTS.similarity_max_tokens
    max_bytes: int = _DEFAULTS.max_code_bytes
    tree: ast.Module = field(default_factory=lambda: ast.Module([], []))
    symbols: symtable.SymbolTable | None = None

    @functools.cached_property
    def nodes(self) -> list[ast.AST]:
        return list(ast.walk(self.tree))

    @functools.cached_property
    def env(self) -> _EnvClass | None:
        return _env_class(self.tree)


def check_parses(d: Design) -> Finding | None:
    """The source parses and its scopes are consistent (``symtable``), as the verifier's parse
    check and the jail's loader demand: SYNTAX otherwise."""
    result = parse_source(d.code, d.max_bytes)
    if isinstance(result, Failure):
        return Finding(result)
    try:
        d.symbols = symtable.symtable(d.code, "env.py", "exec")
    except SyntaxError as exc:  # e.g. "name 'x' is assigned to before global declaration"
        return Finding(Failure(FailureKind.SYNTAX, f"line {exc.lineno}: {exc.msg}"))
    except PARSE_ERRORS as exc:
        why = f"source cannot be parsed: {type(exc).__name__}: {exc}"
        return Finding(Failure(FailureKind.SYNTAX, why))
    d.tree = result
    return None


Method = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class _EnvClass:
    node: ast.ClassDef
    tool_use: bool
    methods: dict[str, Method]  # the last def of each name


def _env_class(tree: ast.Module) -> _EnvClass | None:
    """The class the jail would load (the last ``...Env`` class), when it is built directly on
    TextEnv or ToolUseEnv; None when there is none or its bases are out of sight."""
    found = [
        (n, {f.name: f for f in n.body if isinstance(f, _FUNCTIONS)})
        for n in tree.body
        if isinstance(n, ast.ClassDef) and n.name.endswith("Env")
    ]
    found = [(n, methods) for n, methods in found if n.bases or {"reset", "step"} <= methods.keys()]
    if not found:
        return None
    node, methods = found[-1]
    bases = [b.id if isinstance(b, ast.Name) else "" for b in node.bases]
    if not bases or node.keywords or not all(b in _BASES for b in bases):
        return None
    return _EnvClass(node, any(_BASES[b] for b in bases), methods)


def _walk(roots: Sequence[ast.AST], skip: Callable[[ast.AST], bool]) -> Iterator[ast.AST]:
    """Every node under ``roots``, iteratively (deep expressions do not recurse); a node for
    which ``skip`` is true is yielded but not descended into."""
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        yield node
        if not skip(node):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def check_hook_arity(d: Design) -> Finding | None:
    """The hooks the bases call return what the bases expect, where a returned tuple literal
    (without ``*``) shows otherwise: ``play`` three values (TextEnv.step unpacks them),
    ``setup`` the task text (reset()'s observation), ``check_answer`` a score (float() of it).
    Hooks a class bypasses (it overrides ``act``, ``step`` or ``reset``) are not judged."""
    if (env := d.env) is None:
        return None
    own = env.methods.keys()
    rules: list[tuple[str, int | None, FailureKind, str]] = []  # hook, tuple size, kind, why
    if not own & {"act", "step"} and env.tool_use:
        why = "a score in [0, 1] (float() of a tuple: TypeError when it runs)"
        rules.append(("check_answer", None, FailureKind.CRASH, why))
    elif not own & {"act", "step"}:
        why = "(observation, reward, terminated) (step() unpacks 3: ValueError when it runs)"
        rules.append(("play", 3, FailureKind.CRASH, why))
    if "reset" not in own:
        why = "the task text, a str (reset()'s observation must be str)"
        rules.append(("setup", None, FailureKind.CONTRACT, why))
    for hook, size, kind, why in rules:  # the hook's own returns, not its nested functions
        body = env.methods[hook].body if hook in own else []
        for node in _walk(body, lambda n: isinstance(n, _SCOPES)):
            value = node.value if isinstance(node, ast.Return) else None
            if not isinstance(value, ast.Tuple) or len(value.elts) == size:
                continue
            if not any(isinstance(e, ast.Starred) for e in value.elts):
                n, line = len(value.elts), value.lineno
                why = f"{hook}() returns a {n}-tuple (line {line}); return {why}"
                return Finding(Failure(kind, why), hook, line)
    return None


@functools.cache
def _base_attributes(tool_use: bool) -> frozenset[str]:
    """Attributes an instance of our base class has: its class's names and what the base
    module's methods assign to ``self`` (our own trusted source, parsed, not a design)."""
    cls = base.ToolUseEnv if tool_use else base.TextEnv
    tree = ast.parse(inspect.getsource(base))
    assigned = {n.attr for n in ast.walk(tree) if _is_attribute(n, "self", ast.Store)}
    return frozenset(dir(cls)) | assigned


def _is_attribute(
    node: ast.AST, owner: str, ctx: type[ast.expr_context]
) -> TypeGuard[ast.Attribute]:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ctx)
        and isinstance(node.value, ast.Name)
        and node.value.id == owner
    )


def _class_level_names(node: ast.ClassDef) -> set[str]:
    """Names bound in the class body: attributes, methods, nested classes, imports."""
    names: set[str] = set()
    for n in _walk(list(node.body), lambda n: isinstance(n, _SCOPES)):
        if isinstance(n, (*_FUNCTIONS, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, ast.alias):
            names.add((n.asname or n.name).split(".")[0])
    return names


def _self_name(fn: Method) -> str | None:
    """The instance's parameter of a method; None for static and class methods."""
    decorators = {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}
    args = fn.args.posonlyargs + fn.args.args
    if decorators & {"staticmethod", "classmethod"} or not args:
        return None
    return args[0].arg


def _guards_attribute_error(node: ast.AST) -> TypeGuard[ast.Try | ast.TryStar]:
    """A ``try`` with a handler that catches AttributeError."""
    for handler in node.handlers if isinstance(node, (ast.Try, ast.TryStar)) else []:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(k is None or (isinstance(k, ast.Name) and k.id in _CATCHERS) for k in kinds):
            return True
    return False


def _unguarded_reads(fn: Method, me: str) -> Iterator[ast.Attribute]:
    """``me.<attr>`` loads in ``fn`` outside a ``try`` that catches AttributeError."""
    guarded: set[int] = set()  # ids of the statements of such try bodies
    for node in _walk([fn], lambda n: id(n) in guarded):
        if _guards_attribute_error(node):
            guarded.update(id(s) for s in node.body)
        elif _is_attribute(node, me, ast.Load) and id(node) not in guarded:
            yield node


def _named_attributes(nodes: list[ast.AST]) -> set[str] | None:
    """Attribute names written as strings in ``hasattr``/``getattr`` calls (guarded reads);
    None when the design sets attributes where a syntax tree cannot follow them."""
    names = set()
    for n in nodes:
        if (isinstance(n, ast.Name) and n.id in ("setattr", "vars")) or (
            isinstance(n, ast.Attribute) and n.attr == "__dict__"
        ):
            return None
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and len(n.args) >= 2:
            arg = n.args[1]
            if n.func.id in ("hasattr", "getattr") and isinstance(arg, ast.Constant):
                names.add(str(arg.value))
    return names


def check_self_attributes(d: Design) -> Finding | None:
    """Every ``self.<name>`` the env class's methods read is assigned in one of them, defined
    in the class body or provided by the base; else the read raises AttributeError (a crash).
    ``tool_`` methods are exempt (call_tool answers their AttributeError with an error text),
    and so are reads named in ``hasattr``/``getattr`` or inside a ``try`` that catches it."""
    for fn, read in _unknown_reads(d):
        why = (
            f"self.{read.attr} is read in {fn.name} (line {read.lineno}) but never "
            "assigned (AttributeError when it runs)"
        )
        return Finding(Failure(FailureKind.CRASH, why), fn.name, read.lineno)
    return None


def _unknown_reads(d: Design) -> Iterator[tuple[Method, ast.Attribute]]:
    """The env class's unguarded ``self.<name>`` reads of names nothing binds, in order of the
    methods (none when the class sets attributes where a syntax tree cannot follow them)."""
    env, guarded = d.env, _named_attributes(d.nodes)
    if env is None or guarded is None or {"__getattr__", "__getattribute__"} & env.methods.keys():
        return
    selves = [(fn, me) for fn in env.methods.values() if (me := _self_name(fn))]
    known = guarded | _class_level_names(env.node) | _base_attributes(env.tool_use)
    known |= {n.attr for fn, me in selves for n in ast.walk(fn) if _is_attribute(n, me, ast.Store)}
    for fn, me in selves:
        reads = [] if env.tool_use and fn.name.startswith("tool_") else _unguarded_reads(fn, me)
        yield from ((fn, read) for read in reads if read.attr not in known)


def unwritten_methods(code: str) -> list[str]:
    """Methods the env class calls on ``self`` (``self.score(...)``) that nothing defines or
    assigns, in order of first call: what a follow-up request can ask the model to write.
    Empty when the code does not parse or its class is out of sight."""
    try:
        tree = ast.parse(code)
    except PARSE_ERRORS:  # the gate's parses check grades it
        return []
    d = Design(code, tree=tree)
    reads = {id(read) for _, read in _unknown_reads(d)}
    called = [
        n.func.attr
        for n in d.nodes
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and id(n.func) in reads
    ]
    return list(dict.fromkeys(called))


def _symbols(top: symtable.SymbolTable) -> Iterator[tuple[symtable.SymbolTable, symtable.Symbol]]:
    """Every symbol of every scope, with its scope."""
    tables = [top]
    while tables:
        table = tables.pop()
        tables += table.get_children()
        yield from ((table, s) for s in table.get_symbols())


def _evaluated_loads(tree: ast.Module) -> dict[str, int]:
    """The first line each name is read on, leaving out annotations Python never evaluates:
    a function's local ones, and all under ``from __future__ import annotations``."""
    lazy = any(
        isinstance(n, ast.ImportFrom)
        and n.module == "__future__"
        and n.names[0].name == "annotations"
        for n in tree.body
    )
    first: dict[str, int] = {}
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]  # (node, in a function's body)
    while stack:
        node, in_fn = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            first[node.id] = min(first.get(node.id, node.lineno), node.lineno)
        lazy_ann = isinstance(node, ast.AnnAssign) and (lazy or in_fn)
        skip = getattr(node, "annotation", None) if lazy or lazy_ann else None
        skip = node.returns if lazy and isinstance(node, _FUNCTIONS) else skip
        inner = isinstance(node, (*_FUNCTIONS, ast.Lambda)) or (
            in_fn and not isinstance(node, ast.ClassDef)
        )
        stack += [(c, inner) for c in ast.iter_child_nodes(node) if c is not skip]
    return first


def check_bare_names(d: Design) -> Finding | None:
    """Every name the code reads from its module's globals is bound there, by the prelude (all
    of it, as if the policy allowed every module) or a builtin; else reading it raises
    NameError (a crash). Star imports and ``globals()`` pass: the names are out of sight."""
    top = d.symbols
    if top is None or any(
        (isinstance(n, ast.alias) and n.name == "*")
        or (isinstance(n, ast.Name) and n.id == "globals")
        for n in d.nodes
    ):
        return None
    known = set(_MODULE_NAMES | design_bindings(["*"], d.tree).keys())
    for table, s in _symbols(top):  # bound at the top level, or from a function by ``global``
        if (s.is_assigned() or s.is_imported() or s.is_namespace()) and (
            table is top or s.is_declared_global()
        ):
            known.add(s.get_name())
    loads = _evaluated_loads(d.tree)
    unbound = loads.keys() - known
    missing = [
        (t, s.get_name())
        for t, s in _symbols(top)
        if s.is_referenced() and s.is_global() and s.get_name() in unbound
    ]
    if not missing:
        return None
    table, name = min(missing, key=lambda m: loads[m[1]])
    where = "module" if table is top else table.get_name()
    scope = "at module level" if table is top else f"in {where}"
    why = (
        f"name {name!r} is read {scope} (line {loads[name]}) but never defined or imported "
        "(NameError when it runs)"
    )
    return Finding(Failure(FailureKind.CRASH, why), where, loads[name])


def check_near_copy(d: Design) -> Finding | None:
    """Not a near-verbatim copy of its parent: the verifier's novelty test on source, alone."""
    if d.parent is None:
        return None
    try:
        theirs = source_tokens(d.parent, d.max_tokens)
        mine = source_tokens(d.code, d.max_tokens)
    except (*PARSE_ERRORS, tokenize.TokenError):  # a parent that does not parse: not copied
        return None
    score = near_verbatim(mine, theirs, d.max_similarity)
    if score is not None:
        why = (
            f"a near-verbatim copy of {d.parent_name!r}: source similarity {score:.3f} >= "
            f"{d.max_similarity:g}"
        )
        return Finding(Failure(FailureKind.DUPLICATE, why))
    return None


GATE_CHECKS: list[tuple[str, Callable[[Design], Finding | None]]] = [
    ("parses", check_parses),
    ("hook_arity", check_hook_arity),
    ("self_attributes", check_self_attributes),
    ("bare_names", check_bare_names),
    ("near_copy", check_near_copy),
]


def gate(
    code: str,
    *,
    parent: str | None = None,
    max_similarity: float = _DEFAULTS.max_similarity,
    max_tokens: int = _DEFAULTS.similarity_max_tokens,
    max_bytes: int = _DEFAULTS.max_code_bytes,
    parent_name: str = "parent",
) -> Failure | None:
    """None when ``code`` passes every check of :data:`GATE_CHECKS`, else the first failure,
    with the kind the jailed verifier would give. Defaults are the verifier's
    (:class:`~spade.config.VerifyConfig`); pass the campaign's own where they differ."""
    design = Design(code, parent, parent_name, max_similarity, max_tokens, max_bytes)
    for _name, check in GATE_CHECKS:
        if (found := check(design)) is not None:
            return found.failure
    return None
