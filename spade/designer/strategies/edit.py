"""The edit strategy (ACCEL's level editing): a whole working environment from the memory or
the seed pool is turned into a new one on the document.

The parent is drawn from the memory with the slot's rng; a slot with none is written instead.
An answer that left out module-level names of the parent it still uses inherits them
(:mod:`spade.designer.inherit`). Otherwise an edit is sampled and repaired as a written module.
"""

from __future__ import annotations

from spade.designer.followup import parent_code
from spade.designer.inherit import inherit_missing
from spade.designer.prompts import edit_prompt
from spade.designer.strategies.base import Slot, references
from spade.designer.strategies.write import Write, module_of
from spade.records import DesignAttempt, env_id_for


class Edit(Write):
    """A whole module per answer, grounded on a parent shown whole in the prompt; sampled and
    repaired as a written module."""

    name = "edit"

    def prepare(self, att: DesignAttempt, slot: Slot) -> bool:
        parent = slot.memory.parent_for(slot.skill, slot.rng, slot.designer)
        if parent is None:
            return False
        att.messages = edit_prompt(slot.text, slot.skill, tool_use=slot.tool_use, parent=parent)
        att.strategy, att.parent_id = self.name, parent.env_id
        att.references = references(slot, [parent])
        return True

    def take_code(self, att: DesignAttempt, answer: str) -> None:
        """The answer's module, completed with the parent's module-level definitions it uses
        and lacks (named in ``att.inherited``)."""
        code = module_of(att, answer)
        if code is None:
            return
        parent = parent_code(att)
        if parent is not None:
            code, att.inherited = inherit_missing(code, parent, str(att.parent_id))
        att.code, att.env_id = code, env_id_for(code)


EDIT = Edit()
