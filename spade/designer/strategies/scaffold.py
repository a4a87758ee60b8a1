"""The scaffold strategy: the harness writes the module's frame (fence, class header, skill and
each hook's signature) and the model writes each hook's body in a request of its own
(:mod:`spade.designer.scaffold`).

Its prompt is the write prompt (:func:`~spade.designer.strategies.write.ask_to_write`); the
class is named after the document. A scaffold is assembled, not answered, so it is never
repaired.
"""

from __future__ import annotations

from spade.config import CampaignConfig
from spade.designer import scaffold
from spade.designer.strategies.base import Slot, rejection_feedback
from spade.designer.strategies.write import WRITE, ask_to_write
from spade.inference.base import Backend
from spade.records import DesignAttempt, env_id_for


class Scaffold:
    """The frame is the harness's, each body the model's."""

    name = "scaffold"
    whole_answer = False

    def prepare(self, att: DesignAttempt, slot: Slot) -> bool:
        att.strategy, att.class_name = self.name, scaffold.class_name(slot.text)
        att.prefill = scaffold.header(att.class_name, slot.skill, slot.tool_use)
        att.stop = list(scaffold.STOP)
        ask_to_write(att, slot)
        return True

    async def sample(
        self, backend: Backend, attempts: list[DesignAttempt], cfg: CampaignConfig
    ) -> None:
        """Every body of ``attempts``, one hook at a time; the assembled module is the code."""
        d = cfg.designer
        await scaffold.sample_bodies(backend, attempts, d.scaffold_body_tokens, d.temperature)
        for att in attempts:
            att.env_id = env_id_for(att.code) if att.code is not None else None

    def take_code(self, att: DesignAttempt, answer: str) -> None:
        """Not reached (a scaffold is sampled body by body and never repaired); an answer
        would be read as a written module."""
        WRITE.take_code(att, answer)

    async def complete(
        self, backend: Backend, attempts: list[DesignAttempt], cfg: CampaignConfig
    ) -> None:
        return None

    def repairable(self, att: DesignAttempt) -> bool:
        return False  # a frame with the model's bodies, not an answer to correct

    def repair_feedback(self, att: DesignAttempt) -> str:
        return rejection_feedback(att)


SCAFFOLD = Scaffold()
