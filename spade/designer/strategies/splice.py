"""The splice strategy: the model rewrites a few whole methods of a working parent under one
rule-level directive, and the harness splices them into the parent's source.

The parent and then the directive are drawn with the slot's rng; a slot with no parent, or
one whose parent cannot be spliced (no ``setup`` hook to continue), is written instead. The
answer is prefilled with the first asked method's signature (:mod:`spade.designer.splice`);
methods it left unwritten are asked in follow-up requests (:mod:`spade.designer.followup`), and
a repair answers with the corrected methods, spliced into the parent again.
"""

from __future__ import annotations

from spade.config import CampaignConfig
from spade.designer.directives import draw_directive
from spade.designer.followup import complete_splices, parent_code, splice_answer
from spade.designer.prompts import splice_prompt
from spade.designer.splice import class_name_for, parent_methods, plan_splice
from spade.designer.strategies.base import Slot, references, rejection_feedback
from spade.designer.strategies.write import WRITE
from spade.inference.base import Backend
from spade.records import DesignAttempt


class Splice:
    """Methods per answer, spliced into the parent shown in the prompt."""

    name = "splice"
    whole_answer = True

    def prepare(self, att: DesignAttempt, slot: Slot) -> bool:
        d = slot.designer
        parent = slot.memory.parent_for(slot.skill, slot.rng, d)
        if parent is None:
            return False
        directive = draw_directive(slot.rng, parent_methods(parent.code_head), d.directives)
        plan = plan_splice(parent.code_head, directive)
        if plan is None:
            return False
        att.messages = splice_prompt(
            slot.text, slot.skill, parent=parent, directive=directive, plan=plan
        )
        att.strategy, att.parent_id = self.name, parent.env_id
        att.references = references(slot, [parent])
        att.directive, att.prefill, att.stop = directive.name, plan.prefill, list(plan.stop)
        att.class_name = class_name_for(slot.text, plan.class_name)
        return True

    async def sample(
        self, backend: Backend, attempts: list[DesignAttempt], cfg: CampaignConfig
    ) -> None:
        return None  # answered by the batch's design request, after the prefill

    def take_code(self, att: DesignAttempt, answer: str) -> None:
        """The answer's methods (a repair's own, not the first answer's again) spliced into the
        parent; read as a written module when the parent is not among the references."""
        parent = parent_code(att)
        if parent is None:
            WRITE.take_code(att, answer)
            return
        splice_answer(att, parent, answer)

    async def complete(
        self, backend: Backend, attempts: list[DesignAttempt], cfg: CampaignConfig
    ) -> None:
        """Follow-up requests for the methods the answers left unwritten."""
        await complete_splices(backend, attempts, cfg)

    def repairable(self, att: DesignAttempt) -> bool:
        return True

    def repair_feedback(self, att: DesignAttempt) -> str:
        return rejection_feedback(att, methods=True)  # the corrected methods, not a module


SPLICE = Splice()
