"""The splice strategy's menu of rule-level changes (directives), and how one is drawn.

A directive names the change asked of a splice and the methods its answer rewrites. The
contract's hooks are named by role (``move`` is the parent's ``play`` or ``check_answer``);
a *rule* directive names one of a game's own small rule methods instead (``clue``: what a
guess or probe reveals; ``credit``: the partial score), which only parents that define it
offer. A rule method is a few lines whose signature and docstring say what it is for: the
smallest answer that still changes the game, and one whose failure modes are few (the
parent's parsing, win check and ``solution`` stay), where a rewritten ``play`` sank most small
models' designs (docs/results/designs.md).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

ROLES = ("setup", "move", "solution")
"""The contract's hooks by role, as a directive names them."""


@dataclass(frozen=True)
class Directive:
    """One rule-level change asked of a splice: a name for the records, the words for the
    model, and the methods it rewrites: roles of :data:`ROLES` or, for a rule directive, the
    parent's own method names. No more than the change needs, since the smaller the answer the
    likelier a small model gets it right (SWE-smith rewrites one function at a time). A change
    of the feedback or of the scoring keeps the parent's hidden state and its ``solution``."""

    name: str
    text: str
    hooks: tuple[str, ...] = ROLES

    @property
    def rule(self) -> bool:
        """Whether it rewrites a game's own rule methods rather than the contract's hooks."""
        return not set(self.hooks) <= set(ROLES)

    def applies_to(self, methods: Collection[str]) -> bool:
        """Whether a parent with these methods can take it (a rule directive needs them all)."""
        return not self.rule or all(h in methods for h in self.hooks)


DIRECTIVES: tuple[Directive, ...] = (
    Directive(
        "feedback",
        "Change what the feedback after a move reveals: give a different kind of clue than the"
        " parent does (for example a count, a distance, a yes/no answer to a question, or which"
        " parts are right), so that the player needs a different way of reasoning.",
        ("move",),
    ),
    Directive(
        "hidden_state",
        "Change the type of the hidden state: if the parent hides a number, hide a word, a set"
        " or a short sequence; if it hides a collection, hide a number or a single choice. The"
        " moves and feedback follow from the new hidden state.",
    ),
    Directive(
        "win_rule",
        "Change the win condition and the partial-credit rule: what counts as solving the task"
        " and how an episode that ends partly right is scored (reward between 0 and 1).",
        ("move",),
    ),
    Directive(
        "legal_moves",
        "Change which moves are legal and what a move is: a different kind of action than the"
        " parent's (for example naming an item, asking about a property, or choosing between"
        " options), with a helpful message for a move that is not legal.",
        ("move", "solution"),
    ),
    Directive(
        "clue",
        "Change what the clue tells the player: a different kind of clue than the parent's (for"
        " example a distance band, a yes/no answer, a parity or digit-sum hint, a comparison,"
        " which parts are right), worded with the document's names and things. It must be true"
        " of the hidden state and still let a careful player work out the answer over several"
        " moves, without giving the answer away.",
        ("clue",),
    ),
    Directive(
        "credit",
        "Change how an episode that ends without a full win is scored: a different partial-credit"
        " rule than the parent's, returning a float from 0.0 to less than 1.0 (only a full win"
        " scores 1.0) that rewards getting closer to the answer.",
        ("credit",),
    ),
)

DIRECTIVE_NAMES = tuple(d.name for d in DIRECTIVES)


def draw_directive(
    rng: random.Random,
    methods: Collection[str] | None = None,
    allowed: Sequence[str] | None = None,
) -> Directive:
    """One directive, chosen with ``rng`` (seeded per slot by the caller) among those named in
    ``allowed`` (all: None) that a parent with ``methods`` takes (any: None). When none of
    them applies, one of the menu's contract-level directives, which every parent takes."""
    menu = [
        d
        for d in DIRECTIVES
        if (allowed is None or d.name in allowed) and (methods is None or d.applies_to(methods))
    ]
    return rng.choice(menu or [d for d in DIRECTIVES if not d.rule])


def directive_named(name: str | None) -> Directive | None:
    """The directive of the menu called ``name`` (an attempt's record); None for another."""
    return next((d for d in DIRECTIVES if d.name == name), None)
