"""What every designer strategy implements (:class:`Strategy`), what it is told of the slot it
prepares an attempt for (:class:`Slot`), and the helpers the strategies share.

A strategy (``designer.strategy``) owns how one design is asked for and read: the prompt, parent,
prefill and stops of an attempt (:meth:`Strategy.prepare`), how it is sampled (one batched design
request, or :meth:`Strategy.sample` on its own, then :meth:`Strategy.complete`), how code is
taken from an answer (:meth:`Strategy.take_code`), and whether and how a rejected design is
repaired. :mod:`spade.designer.designer` runs the batch and calls these by the attempt's
``strategy``; the registry is :mod:`spade.designer.strategies`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from spade.config import CampaignConfig, DesignerConfig
from spade.curriculum.memory import EnvironmentMemory, MemoryRecord
from spade.designer.prompts import contract_references, repair_message
from spade.inference.base import Backend
from spade.records import DesignAttempt

REASON_CHARS = 500
"""Longest failure reason told to a repair turn."""


@dataclass(frozen=True)
class Slot:
    """One slot of an attempt, as a strategy prepares it.

    ``rng`` is seeded per regeneration, attempt and slot, and its draws come in a fixed order:
    the parent (edit, splice), the splice's directive, then the write prompt's memory examples
    (also when an edit or splice falls back to writing), so a re-run builds the same prompts.
    """

    text: str  # the grounding document, cut to the mode's word budget
    skill: str
    tool_use: bool
    rng: random.Random
    memory: EnvironmentMemory
    designer: DesignerConfig


class Strategy(Protocol):
    """How one kind of design is asked for, sampled, read and repaired."""

    name: str
    """The ``designer.strategy`` value, and the ``strategy`` of the attempts it prepares."""
    whole_answer: bool
    """True: one design request answers an attempt (batched with the others'), read by
    :meth:`take_code`; False: :meth:`sample` samples the attempts itself."""

    def prepare(self, att: DesignAttempt, slot: Slot) -> bool:
        """Fill ``att``'s prompt, strategy, parent, prefill, stops and references for ``slot``;
        False (``att`` untouched) when it cannot (no parent to vary): the slot is written."""
        ...

    async def sample(
        self, backend: Backend, attempts: list[DesignAttempt], cfg: CampaignConfig
    ) -> None:
        """Sample ``attempts`` (this strategy's, of one batch) when not :attr:`whole_answer`."""
        ...

    def take_code(self, att: DesignAttempt, answer: str) -> None:
        """The attempt's code (and env id) from ``answer``, a first answer's or a repair's
        text; or its parse failure."""
        ...

    async def complete(
        self, backend: Backend, attempts: list[DesignAttempt], cfg: CampaignConfig
    ) -> None:
        """After the first answers' code was taken: any follow-up requests (splice)."""
        ...

    def repairable(self, att: DesignAttempt) -> bool:
        """Whether a rejected design of this strategy gets repair turns at all."""
        ...

    def repair_feedback(self, att: DesignAttempt) -> str:
        """The user turn telling the designer why its newest answer was rejected."""
        ...


def references(slot: Slot, shown: Sequence[MemoryRecord]) -> list[dict[str, str]]:
    """What an attempt must not copy: the contract's examples and the designs its prompt shows
    (its parent, or its memory examples)."""
    return contract_references(slot.tool_use) + [
        {"name": r.env_id, "code": r.code_head} for r in shown
    ]


def rejection_feedback(att: DesignAttempt, *, methods: bool = False) -> str:
    """The repair turn for ``att``'s newest answer: its parse failure, or the verifier's failed
    check, reason and traceback; ``methods``: the answer is methods to splice, not a module."""
    reason = (att.failure_reason or "")[:REASON_CHARS]
    if att.code is None:
        return repair_message(att.failure_kind or "parse", reason, methods=methods)
    verdict = att.verdict or {}
    check, traceback = verdict.get("failed_check"), verdict.get("traceback")
    return repair_message(att.failure_kind or "rejected", reason, check, traceback, methods=methods)
