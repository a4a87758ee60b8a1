"""The write strategy: a new environment written from the document, with designs from the
memory shown as inspiration (positives) and as designs to avoid (negatives).

It is also what every other strategy falls back to: an edit or splice slot with no parent to
vary is written, and a scaffold's prompt is the write prompt (:func:`ask_to_write`).
"""

from __future__ import annotations

from spade.config import CampaignConfig
from spade.curriculum.memory import negative_label
from spade.designer.extract import extract_code
from spade.designer.prompts import design_prompt
from spade.designer.strategies.base import Slot, references, rejection_feedback
from spade.errors import DesignParseError
from spade.inference.base import Backend
from spade.records import DesignAttempt, env_id_for


def ask_to_write(att: DesignAttempt, slot: Slot) -> None:
    """``att``'s prompt asks for a new module on the slot's document, showing the memory's
    examples for its skill (drawn with the slot's rng), which become its references."""
    d = slot.designer
    positives, negatives = slot.memory.examples_for(slot.skill, slot.rng, d)
    att.messages = design_prompt(
        slot.text,
        slot.skill,
        tool_use=slot.tool_use,
        positives=positives,
        negatives=[(n, negative_label(n, d)) for n in negatives],
    )
    att.references = references(slot, positives + negatives)


def module_of(att: DesignAttempt, answer: str) -> str | None:
    """The module in ``answer``; None with the attempt's parse failure when it has none (the
    model wrote no usable module: data)."""
    try:
        return extract_code(answer)
    except DesignParseError as exc:
        att.failure_kind, att.failure_reason = "parse", str(exc)
        return None


class Write:
    """A whole module per answer; a repair answers with the whole corrected module."""

    name = "write"
    whole_answer = True

    def prepare(self, att: DesignAttempt, slot: Slot) -> bool:
        att.strategy = self.name
        ask_to_write(att, slot)
        return True

    async def sample(
        self, backend: Backend, attempts: list[DesignAttempt], cfg: CampaignConfig
    ) -> None:
        return None  # answered by the batch's design request

    def take_code(self, att: DesignAttempt, answer: str) -> None:
        code = module_of(att, answer)
        if code is not None:
            att.code, att.env_id = code, env_id_for(code)

    async def complete(
        self, backend: Backend, attempts: list[DesignAttempt], cfg: CampaignConfig
    ) -> None:
        return None

    def repairable(self, att: DesignAttempt) -> bool:
        return True

    def repair_feedback(self, att: DesignAttempt) -> str:
        return rejection_feedback(att)


WRITE = Write()
