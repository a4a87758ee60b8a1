"""Is a design new? Source similarity to reference environments, and side-by-side play.

A reference is an environment the design must not merely repeat: its parent when it was an
edit, the memory or pool examples the designer was shown. Two tests, the cheap one first:

- **Source**: both sources are normalised and tokenised, and the similarity is difflib's
  ratio (2 x matched / total) over the token lists. Normalising parses the code, drops
  docstrings and unparses it (comments, blank lines, layout and quoting are gone), then
  replaces every identifier the design binds itself (classes, functions, variables,
  arguments, attributes it assigns) by one placeholder: renaming is the cheapest disguise of
  a copy. Literals and everything else are kept: the strings and numbers are what a real
  variant changes (a digit code made a letter code). Tokens rather than characters: a token is
  a unit of meaning, the lists are ~4x shorter (difflib is quadratic in the worst case), and
  popular tokens need no "junk" heuristic (``autojunk`` is off: it would silently skip
  ``self`` and ``(``). Each list is cut at a size cap, and references are ranked by exact
  ratio with difflib's cheap upper bound (``quick_ratio``) pruning those that cannot rank.
- **Behaviour**: the design and a reference play in their own jailed sessions, in lockstep,
  from the same seeds with the same actions (:mod:`spade.verify.probes`: the design's solution
  and its near miss, malformed actions, random play); the same rewards and ends throughout,
  with observations the same or reworded one to one (:mod:`spade.verify.wording`), make the
  design a duplicate. A duplicate needs evidence: one that plays alike on the probe seeds
  plays on more, with more near misses and the reference's own solution, and must show no
  number the reference's observations do not explain, before it is called one (a clue that
  adds "within 50" maps one to one onto "lower" on seeds where every "lower" was near).

References are untrusted code too: their sources are only parsed here, and they run only in
the jail. A reference that cannot be parsed or loaded is skipped with a note.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import io
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spade.envs.actions import extract_boxed
from spade.pysource import PARSE_ERRORS, parse_module
from spade.sandbox.failures import EnvFailure
from spade.sandbox.policy import SandboxPolicy
from spade.sandbox.session import JailedSession
from spade.verify.probes import Plan
from spade.verify.probes import near_miss as near_miss  # where tests have found it
from spade.verify.static import own_names
from spade.verify.wording import Wording, unechoed

_DOC_OWNERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_DROPPED = {tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER}
_MARKERS = {tokenize.NEWLINE: "<nl>", tokenize.INDENT: "<in>", tokenize.DEDENT: "<de>"}
_PLACEHOLDER = "<id>"
LITERAL = "\x00"
"""Prefix of a literal's token (a number, a string or an f-string's text): what a retuned or
reworded copy changes, told apart from a change of the code itself."""
_LITERALS = {tokenize.NUMBER, tokenize.STRING, tokenize.FSTRING_MIDDLE}
_UNPARSABLE = (*PARSE_ERRORS, tokenize.TokenError)


@dataclass(frozen=True)
class Reference:
    """An environment a design is compared with: a name for reasons, and its source."""

    name: str
    code: str


def source_tokens(code: str, max_tokens: int) -> list[str]:
    """The normalised token list of ``code``, at most ``max_tokens`` long (see the module
    docstring). Raises one of ``_UNPARSABLE`` for code that cannot be parsed."""
    tree = parse_module(code)
    for node in ast.walk(tree):
        if (
            isinstance(node, _DOC_OWNERS)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
            and isinstance(node.body[0].value.value, str)
        ):
            node.body = node.body[1:] or [ast.Pass()]
    own = own_names(tree) | {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and not isinstance(n.ctx, ast.Load)
    }
    try:
        text = ast.unparse(tree)
    # The unparser recurses per level: an expression that parses but nests deeper than it
    # recurses (a 1,000-term sum) is compared as written rather than crashing the host.
    except RecursionError:
        text = code
    tokens: list[str] = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in _DROPPED:
            continue
        if tok.type == tokenize.NAME and tok.string in own:
            tokens.append(_PLACEHOLDER)
        elif tok.type in _LITERALS:
            tokens.append(LITERAL + tok.string)
        else:
            tokens.append(_MARKERS.get(tok.type, tok.string))
        if len(tokens) >= max_tokens:
            break
    return tokens


def similarity(design: Sequence[str], reference: Sequence[str]) -> float:
    """difflib's ratio (2 x matched / total) of two token lists, in [0, 1]. The ratio is not
    quite symmetric; this is the orientation :func:`rank_references` uses (the design is
    difflib's indexed second sequence)."""
    return difflib.SequenceMatcher(None, reference, design, autojunk=False).ratio()


def literal_edits_only(design: Sequence[str], reference: Sequence[str]) -> bool:
    """Whether every token where two token lists differ is a literal (:data:`LITERAL`): the
    same code with other constants or wording (a retuned or reworded copy), however similar."""
    matcher = difflib.SequenceMatcher(None, reference, design, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        changed = [*reference[i1:i2], *design[j1:j2]]
        if tag != "equal" and not all(t.startswith(LITERAL) for t in changed):
            return False
    return True


def near_verbatim(
    design: Sequence[str], reference: Sequence[str], threshold: float
) -> float | None:
    """The similarity of a design's tokens to a reference's when it is a near-verbatim copy:
    at least ``threshold`` similar, and nothing but literals changed (a one-line change of a
    rule is that similar too, and is left to side-by-side play); None when it is not."""
    score = similarity(design, reference)
    return score if score >= threshold and literal_edits_only(design, reference) else None


@dataclass(frozen=True)
class Scored:
    """A reference with its source similarity to the design."""

    reference: Reference
    similarity: float


@dataclass(frozen=True)
class Ranking:
    """The references most similar to a design by source, most similar first."""

    top: list[Scored]
    compared: int  # references whose source could be compared
    notes: list[str]  # one per reference skipped


def rank_references(
    code: str, references: Sequence[Reference], *, keep: int, max_tokens: int
) -> Ranking:
    """The ``keep`` references most similar to ``code`` by source (exact ratios). References
    are visited by difflib's upper bound (``quick_ratio``) and the visit stops when no bound
    left can beat the ``keep``-th exact ratio found."""
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(source_tokens(code, max_tokens))  # difflib caches its index of seq2
    bounded, notes = [], []
    for ref in references:
        try:
            theirs = source_tokens(ref.code, max_tokens)
        except _UNPARSABLE as exc:  # unparsable: no design that parses is a verbatim copy
            notes.append(f"reference {ref.name!r} skipped: its source does not parse ({exc})")
            continue
        matcher.set_seq1(theirs)
        bounded.append((matcher.quick_ratio(), ref, theirs))
    bounded.sort(key=lambda b: -b[0])
    top: list[Scored] = []
    for bound, ref, theirs in bounded:
        if len(top) >= keep and bound <= top[-1].similarity:
            break
        matcher.set_seq1(theirs)
        scored = Scored(ref, matcher.ratio())
        bisect.insort(top, scored, key=lambda s: -s.similarity)
        del top[keep:]
    return Ranking(top, len(bounded), notes)


VARIANT_SIMILARITY = 0.9
"""Source similarity from which a design is taken for a variant of a reference (a splice of one
rule method is ~0.95-0.99 like its parent; two different bundled games at most 0.60)."""


def variant_parent(code: str, references: Sequence[Reference], max_tokens: int) -> Reference | None:
    """The reference ``code`` varies (a splice's or an edit's parent): the most similar by
    source, if at least :data:`VARIANT_SIMILARITY` similar; None otherwise."""
    if not references:
        return None
    top = rank_references(code, references, keep=1, max_tokens=max_tokens).top
    return top[0].reference if top and top[0].similarity >= VARIANT_SIMILARITY else None


@dataclass(frozen=True)
class Comparison:
    """How a side-by-side play ended: identical throughout, or where it first differed.

    ``identical`` with a ``where``: every step played alike and only first observations differed
    (the same game, reworded: what small models make of "give it a new theme"), or the
    observations differed in wording only (``relabelled``: they correspond one to one)."""

    identical: bool
    seeds: int = 0
    actions: int = 0
    where: str = ""
    relabelled: bool = False


class _ReferenceFailed(Exception):
    """Internal: the reference's session failed; the design's did not."""

    def __init__(self, exc: EnvFailure) -> None:
        self.why = f"{exc.failure.kind}: {exc.failure.reason}"


def constructor_defaults(code: str) -> dict[str, object]:
    """The keyword parameters of the last ``*Env`` class's ``__init__`` whose defaults are
    literals (``max_turns`` aside: the verifier sets it), from the source alone; empty when it
    does not parse or has none."""
    try:
        tree = parse_module(code)
    except PARSE_ERRORS:  # nothing to compare: the verifier's parse check judges it
        return {}
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Env")]
    init = (
        next(
            (
                f
                for f in classes[-1].body
                if isinstance(f, ast.FunctionDef) and f.name == "__init__"
            ),
            None,
        )
        if classes
        else None
    )
    if init is None:
        return {}
    args = init.args.posonlyargs + init.args.args
    defaults = init.args.defaults
    pairs = list(zip(args[len(args) - len(defaults) :], defaults, strict=True))
    keyword = zip(init.args.kwonlyargs, init.args.kw_defaults, strict=True)
    pairs += [(a, d) for a, d in keyword if d is not None]
    out: dict[str, object] = {}
    for arg, default in pairs:
        try:
            value = ast.literal_eval(default)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue  # not a literal: not a size this comparison can set
        if arg.arg != "max_turns":
            out[arg.arg] = value
    return out


def sizes_text(sizes: dict[str, object]) -> str:
    """Constructor sizes as keyword arguments read (``crates=8, top=999``)."""
    return ", ".join(f"{k}={v!r}" for k, v in sizes.items())


def reference_sizes(design: str, reference: str) -> dict[str, object]:
    """The reference's defaults for the constructor parameters the design shares with it, when
    at least one differs from the design's own: the keyword arguments that play the design at
    the reference's sizes (cargo_knapsack with 16 crates is the 8-crate game at 8); empty when
    there is nothing to resize."""
    mine, theirs = constructor_defaults(design), constructor_defaults(reference)
    shared = {k: v for k, v in theirs.items() if k in mine}
    return shared if any(mine[k] != v for k, v in shared.items()) else {}


def _reference_call[**P, T](fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    try:
        return fn(*args, **kwargs)
    except EnvFailure as exc:  # the reference broke where the design did not: they differ
        raise _ReferenceFailed(exc) from None


def play_side_by_side(
    design: JailedSession,
    reference: JailedSession,
    plan_list: Sequence[Plan],
    wording: Wording | None = None,
) -> Comparison:
    """Play every plan on both sessions in lockstep; stop at the first step whose result
    differs. First observations may differ (noted in ``where``): a game whose every move is
    answered alike is the same game, whatever its opening says. A failure of the design's
    session propagates (it is the design's failure); one of the reference's counts as a
    difference. ``wording`` carries the correspondence of observations over several calls."""
    actions, reworded, wording = 0, "", wording or Wording()
    for plan in plan_list:
        turn, obs, step = 0, None, 0
        while turn < plan.steps:
            at = f"seed {plan.seed}, {plan.label} play"
            try:
                if obs is None:  # (re)start the episode from the plan's seed
                    obs, _ = design.reset(plan.seed)
                    theirs, _ = _reference_call(reference.reset, plan.seed)
                    step = 0
                    if obs != theirs and not reworded:
                        reworded = f"{at}: first observations differ"
                action = plan.policy(turn, obs)
                mine = design.step(action)
                other = _reference_call(reference.step, action)
            except _ReferenceFailed as ref:
                return Comparison(
                    False, where=f"{at}, turn {turn + 1}: the reference failed ({ref.why})"
                )
            actions += 1
            turn += 1
            step += 1
            echo = extract_boxed(action) or ""
            text, their_text = unechoed(mine[0], other[0], echo)
            if mine[1:4] != other[1:4] or not wording.matches(text, their_text):
                return Comparison(False, where=f"{at}, action {turn}: results differ")
            wording.record(text, their_text, step, echo, f"{at}, action {turn}")
            obs = None if mine[2] or mine[3] else mine[0]
    seeds = len({p.seed for p in plan_list})
    return Comparison(True, seeds, actions, reworded, wording.relabelled)


def same_game(
    design: JailedSession,
    reference: JailedSession,
    first: Sequence[Plan],
    more: Callable[[JailedSession], Sequence[Plan]],
) -> Comparison:
    """Side-by-side play that calls two games the same only on evidence. The ``first`` plans
    must play alike; then no number the design shows may follow nothing the player knows
    (:meth:`Wording.new_number`); then the ``more`` plans, given the reference's session (more
    seeds, more near misses, the reference's solutions: built only for a suspected copy, so a
    real variant costs nothing more) must play alike too,
    with the same correspondence of observations, and still show no such number."""
    wording = Wording()
    outcome = play_side_by_side(design, reference, first, wording)
    if outcome.identical and (new := wording.new_number()):
        return Comparison(False, where=new)
    extra = list(more(reference)) if outcome.identical else []
    if not extra:
        return outcome
    confirmed = play_side_by_side(design, reference, extra, wording)
    if not confirmed.identical:
        return confirmed
    if new := wording.new_number():
        return Comparison(False, where=new)
    seeds = len({p.seed for p in (*first, *extra)})
    actions = outcome.actions + confirmed.actions
    return Comparison(True, seeds, actions, outcome.where or confirmed.where, wording.relabelled)


def open_reference(
    ref: Reference, policy: SandboxPolicy, max_turns: int
) -> tuple[JailedSession | None, str]:
    """A started jailed session of the reference, or None and the note why it is skipped."""
    session = JailedSession(ref.code, policy=policy, env_kwargs={"max_turns": max_turns})
    try:
        session.start()
    except EnvFailure as exc:  # a reference that does not load is skipped, never our failure
        session.close()
        why = f"{exc.failure.kind}: {exc.failure.reason}"
        return None, f"reference {ref.name!r} skipped: it does not load ({why})"
    return session, ""
