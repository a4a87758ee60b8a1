"""The splice strategy: the model rewrites a few whole methods of a working parent, the harness
splices them in (SWE-smith-style method-level mutation).

Small models do not write or edit a whole environment module reliably (docs/results/designs.md:
cut-off answers, syntax, crashes on names they dropped), and asking for a smaller answer
in words does not work: shown a whole game and told to answer with three methods, the 0.5B coder
rewrote the whole class in 18 of 18 answers. So the answer's *shape* is enforced by how it is
sampled: the answer starts prefilled with the fence and the first method's signature (prompt
tokens, never trained), and sampling stops at the closing fence, at a module-level ``def`` or
``class``, or at a method it was not asked to write (``__init__``). The harness then replaces
the parent's methods of the same names (a new one is added to the class), renames the class,
sets its skill and drops what described the parent's game (its docstrings and declared hint).

Each attempt gets one rule-level *directive* (:mod:`spade.designer.directives`): what the
feedback reveals, the type of the hidden state, the win or partial-credit rule, which moves are
legal, or one of the parent's own rule methods (``clue``, ``credit``), answered with that method
alone, its docstring prefilled; always with a re-theming on the document. Never "change the
constants": a retuned copy is a duplicate by the verifier's novelty check.

Text-level and static only (:mod:`ast` to find the parent's methods, never run): the spliced
module is verified in the jail like any design, and an answer that does not parse is spliced as
written so that the verifier's syntax grading sees it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

from spade.designer.directives import ROLES, Directive
from spade.designer.tidy import (
    HOOKS,
    alias_module_names,
    assigns,
    drop_dead_helpers,
    env_class,
    methods_of,
    self_attributes,
)
from spade.errors import DesignParseError
from spade.pysource import PARSE_ERRORS, parse_module

_NEVER = ("__init__",)
"""Methods an answer may not rewrite (a constructor changed by a small model breaks the
contract's ``max_turns``; sampling stops at its ``def``)."""
FENCE = "```python\n"
_METHOD = re.compile(r"^    (?:async\s+)?def\s+(\w+)\s*\(", re.MULTILINE)


def _asked_hooks(methods: Sequence[str], directive: Directive | None) -> tuple[str, ...]:
    """The parent's methods a directive rewrites: a rule directive's own (none when the parent
    lacks one), else its hooks in the contract's order (all without a directive)."""
    if directive is not None and directive.rule:
        return directive.hooks if directive.applies_to(methods) else ()
    roles = directive.hooks if directive is not None else ROLES
    wanted = {"play" if r == "move" else r for r in roles}
    wanted |= {"check_answer"} if "move" in roles else set()
    return tuple(h for h in HOOKS if h in methods and h in wanted)


@dataclass(frozen=True)
class SplicePlan:
    """What a splice of one parent asks for and how its answer is sampled.

    ``asked``: the hooks the answer rewrites, in order; ``prefill``: the answer's start (the
    fence and the first hook's signature), ``stop``: where sampling ends; ``attributes``: what
    the parent's ``__init__`` assigns (``self.top``, ...), and ``state`` what its ``setup``
    assigns when the answer keeps it (``self.number``, ...), named in the prompt.
    """

    class_name: str
    asked: tuple[str, ...]
    helpers: tuple[str, ...]
    attributes: tuple[str, ...]
    needed: tuple[str, ...]
    prefill: str
    stop: tuple[str, ...]
    state: tuple[str, ...] = ()


def plan_splice(parent: str, directive: Directive | None = None) -> SplicePlan | None:
    """How to splice ``parent`` under ``directive`` (which hooks it rewrites; None: all of
    them); None when it has no environment class with a ``setup`` hook and the hooks asked for
    (the slot is then written, as an edit slot without a parent is)."""
    try:
        tree = parse_module(parent)
    except PARSE_ERRORS:  # a broken parent cannot be spliced: the caller writes instead
        return None
    cls = env_class(tree)
    if cls is None:
        return None
    methods = {m.name: m for m in methods_of(cls)}
    asked = _asked_hooks(list(methods), directive)
    if not asked or "setup" not in methods:
        return None
    signature = signature_of(parent, methods[asked[0]])
    if signature is None:
        return None  # a decorated or oddly indented hook: not a shape the answer can continue
    stop = ["```", "\nclass ", "\ndef ", "\nif __name__"]
    stop += [f"\n    def {name}(" for name in _NEVER if name in methods]
    if directive is not None and directive.rule:
        # one rule method: its docstring (what it is for) starts the answer, and the answer
        # ends where another method would begin (a rewritten play is what sank small models)
        signature += _docstring_lines(parent, methods[asked[0]])
        stop.append("\n    def ")
    helpers = tuple(n for n in methods if n not in asked and n not in _NEVER)
    return SplicePlan(
        class_name=cls.name,
        asked=asked,
        helpers=helpers,
        attributes=_init_attributes(methods.get("__init__")),
        needed=_helper_needs([methods[n] for n in helpers], methods.get("__init__"))
        if "setup" in asked
        else (),  # the parent's setup stays and assigns what its helpers read
        prefill=FENCE + signature + "\n",
        stop=tuple(stop),
        state=() if "setup" in asked else _init_attributes(methods["setup"]),
    )


def signature_of(source: str, method: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The ``def`` line(s) of ``method`` as written in ``source`` (up to its body), at the
    class's 4-space indent; None for a decorated or otherwise indented method."""
    lines = source.splitlines()[method.lineno - 1 : method.body[0].lineno - 1]
    while lines and (not lines[-1].strip() or lines[-1].strip().startswith("#")):
        lines.pop()  # comments above the body's first statement are the body's
    if not lines or not lines[0].startswith("    def ") or method.decorator_list:
        return None
    return "\n".join(lines)


def _docstring_lines(source: str, method: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The docstring of ``method`` as written in ``source`` (a newline first), or nothing when
    it has none or nothing else (a body of its docstring alone cannot be continued)."""
    first = method.body[0]
    if not (_is_docstring(first) and len(method.body) > 1):
        return ""
    lines = source.splitlines()[first.lineno - 1 : first.end_lineno or first.lineno]
    return "\n" + "\n".join(lines)


def _parent_methods(parent: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The methods of the parent's environment class, in order; none when it does not parse
    or has no such class (it is then not spliced)."""
    try:
        cls = env_class(parse_module(parent))
    except PARSE_ERRORS:  # nothing to splice into: plan_splice says so too
        return []
    return methods_of(cls) if cls else []


def parent_methods(parent: str) -> list[str]:
    """The method names of the parent's environment class (see :func:`_parent_methods`)."""
    return [m.name for m in _parent_methods(parent)]


def hook_signature(parent: str, name: str) -> str | None:
    """The signature of the parent's method ``name`` (see :func:`signature_of`); None when the
    parent does not parse or has no such method."""
    method = next((m for m in _parent_methods(parent) if m.name == name), None)
    return signature_of(parent, method) if method is not None else None


def _helper_needs(
    helpers: list[ast.FunctionDef | ast.AsyncFunctionDef],
    init: ast.FunctionDef | ast.AsyncFunctionDef | None,
) -> tuple[str, ...]:
    """``self.<name>`` the helpers read and neither they nor ``__init__`` assign, in order
    (number_hunt's ``end`` reads ``self.closest``, which the parent's ``setup`` assigned)."""
    assigned = set(_init_attributes(init))
    read: list[str] = []
    for fn in helpers:
        stored, loaded = self_attributes(fn)
        assigned |= {f"self.{n}" for n in stored}
        read += [f"self.{n}" for n in loaded]
    methods = {f"self.{fn.name}" for fn in helpers}
    base = {"self.rng", "self.turn", "self.max_turns", "self.done"}
    return tuple(n for n in dict.fromkeys(read) if n not in assigned | methods | base)


def _init_attributes(init: ast.FunctionDef | ast.AsyncFunctionDef | None) -> tuple[str, ...]:
    if init is None:
        return ()
    names = [
        f"self.{t.attr}"
        for node in ast.walk(init)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    ]
    return tuple(dict.fromkeys(names))


def parent_frame(parent: str, asked: tuple[str, ...]) -> str:
    """The parent as a splice prompt shows it: without the methods the answer rewrites (a
    comment where they were). Shown whole, the 0.5B coder's answers were the parent's methods
    again, verbatim (14 of 16 duplicates, similarity 0.994-0.996): what it cannot see it cannot
    copy, and the rest of the class (its constructor, helpers, the docstring telling the game)
    is still there to build on."""
    tree = parse_module(parent)
    cls = env_class(tree)
    if cls is None:
        return parent
    lines = parent.splitlines()
    spans = [
        (min([m.lineno, *(d.lineno for d in m.decorator_list)]) - 1, m.end_lineno or m.lineno)
        for m in methods_of(cls)
        if m.name in asked
    ]
    if not spans:
        return parent
    for i, (start, end) in enumerate(sorted(spans, reverse=True)):
        end += end < len(lines) and not lines[end].strip()
        last = i == len(spans) - 1  # the first method in the file: the comment goes there
        lines[start:end] = [f"    # {', '.join(asked)}: yours to write", ""] if last else []
    return "\n".join(lines).rstrip() + "\n"


def answer_methods(answer: str) -> list[tuple[str, str]]:
    """``(name, text)`` of each class-level method in an answer (text at the class's 4-space
    indent, decorators and trailing blank lines included), in order. Split on the ``def`` lines,
    not parsed: an answer that does not parse is spliced as written, for the verifier to grade."""
    starts = [(m.start(), m.group(1)) for m in _METHOD.finditer(answer)]
    out = []
    for i, (pos, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(answer)
        begin = _decorators_start(answer, pos)
        text = answer[begin:end].rstrip()
        if i + 1 < len(starts):  # the next method's decorators belong to it
            text = answer[begin : _decorators_start(answer, end)].rstrip()
        out.append((name, text))
    return out


def _decorators_start(text: str, pos: int) -> int:
    """Where the ``@`` lines right above the line at ``pos`` begin (``pos`` if there are none)."""
    while pos > 0:
        prev = text.rfind("\n", 0, pos - 1) + 1
        if not text[prev:pos].startswith("    @"):
            return pos
        pos = prev
    return pos


def answer_text(prefill: str, completion: str) -> str:
    """The answer as the model gave it: the prefill (without its fence) and what it sampled,
    cut at a closing fence (the stop string, when a backend keeps it)."""
    text = prefill.removeprefix(FENCE) + completion
    return text.split("```", 1)[0]


def first_word(document: str, limit: int) -> str:
    """The document's first word (letters and digits, at most ``limit``), capitalized; empty
    when it has none: what names a designed class."""
    word = re.search(r"[A-Za-z][A-Za-z0-9]*", document)
    return word.group(0)[:limit].capitalize() if word else ""


def class_name_for(document: str, parent_class: str) -> str:
    """The spliced class's name: the document's first word, then the parent's (e.g.
    ``AspirinNumberHuntEnv``); the parent's name alone when the document gives no word."""
    theme = first_word(document, 20)
    if not theme or parent_class.startswith(theme):
        return parent_class
    return f"{theme}{parent_class}"


def splice(
    parent: str,
    answer: str,
    *,
    class_name: str,
    skill: str,
    note: str,
) -> tuple[str, list[str]]:
    """The parent with the answer's methods spliced in: ``(code, names)``.

    A method of the answer replaces the parent's method of that name (the last one, if the
    answer wrote it twice), a new one is appended to the class; the class is renamed
    ``class_name`` and its ``skill`` set, its docstring and declared ``hint`` (the parent's
    game's) are dropped, and the module's docstring becomes ``note``. Raises
    DesignParseError when the answer holds no method (nothing to splice).
    """
    methods = dict(answer_methods(answer))
    if not methods:
        raise DesignParseError("the answer holds no method to splice into its parent")
    tree = parse_module(parent)
    cls = env_class(tree)
    if cls is None:
        raise ValueError("the parent has no environment class")  # plan_splice said it had
    lines = parent.splitlines()
    edits: list[_Edit] = []
    own = {m.name: m for m in methods_of(cls)}
    for name, text in methods.items():
        if name in own:
            node = own[name]
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            edits.append((start, node.end_lineno or node.lineno, text.splitlines()))
    added = [text for name, text in methods.items() if name not in own]
    end = cls.end_lineno or cls.lineno
    if added:
        edits.append((end, end, [line for t in added for line in ["", *t.splitlines()]]))
    edits += _class_edits(cls, lines, skill)
    edits += _module_doc_edit(tree, note)
    for start, stop, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        lines[start:stop] = new
    code = alias_module_names(drop_dead_helpers("\n".join(lines) + "\n", set(methods)))
    return _rename(code, cls.name, class_name), list(methods)


_Edit = tuple[int, int, list[str]]
"""Lines ``[start, end)`` (0-based) of the parent and what replaces them."""


def _class_edits(cls: ast.ClassDef, lines: list[str], skill: str) -> list[_Edit]:
    """Drop the class's docstring, empty its declared hint (answers read ``self.hint``), set
    its skill (added under the header)."""
    edits: list[_Edit] = []
    has_skill = False
    for i, node in enumerate(cls.body):
        span = (node.lineno - 1, node.end_lineno or node.lineno)
        if i == 0 and _is_docstring(node):
            blank = span[1] < len(lines) and not lines[span[1]].strip()
            edits.append((span[0], span[1] + blank, []))
        elif assigns(node, "hint"):  # the parent's game's; kept as a name (self.hint)
            edits.append((*span, ['    hint = ""']))
        elif assigns(node, "skill"):
            edits.append((*span, [f"    skill = {skill!r}"]))
            has_skill = True
    if not has_skill:
        first = cls.body[0]
        decorators = getattr(first, "decorator_list", [])
        header = min([first.lineno, *(d.lineno for d in decorators)]) - 1
        edits.append((header, header, [f"    skill = {skill!r}", ""]))
    return edits


def _module_doc_edit(tree: ast.Module, note: str) -> list[_Edit]:
    doc = '"""' + note.replace("\\", "/").replace('"', "'") + '"""'
    first = tree.body[0] if tree.body else None
    if first is not None and _is_docstring(first):
        return [(first.lineno - 1, first.end_lineno or first.lineno, [doc])]
    return [(0, 0, [doc, ""])]


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _rename(code: str, old: str, new: str) -> str:
    """Every whole-word use of the parent's class name becomes ``new`` (``super(Old, self)``
    and the header alike)."""
    return code if old == new else re.sub(rf"\b{re.escape(old)}\b", new, code)
