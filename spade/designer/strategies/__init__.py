"""The designer's strategies (``designer.strategy``), one module each, chosen by name.

- :mod:`~spade.designer.strategies.write`: a new module written from the document;
- :mod:`~spade.designer.strategies.edit`: a whole parent turned into a new environment;
- :mod:`~spade.designer.strategies.splice`: a few methods of a parent rewritten and spliced in;
- :mod:`~spade.designer.strategies.scaffold`: the harness's frame, the model's bodies.

What a strategy implements is :class:`~spade.designer.strategies.base.Strategy`; adding one is a
module here and its entry in :data:`STRATEGIES` (and the ``designer.strategy`` Literal).
"""

from __future__ import annotations

from spade.designer.strategies.base import Slot, Strategy
from spade.designer.strategies.edit import EDIT
from spade.designer.strategies.scaffold import SCAFFOLD
from spade.designer.strategies.splice import SPLICE
from spade.designer.strategies.write import WRITE
from spade.registry import lookup

STRATEGIES: dict[str, Strategy] = {s.name: s for s in (WRITE, EDIT, SPLICE, SCAFFOLD)}
"""Strategies by the name ``designer.strategy`` and :attr:`DesignAttempt.strategy` use."""


def strategy_for(name: str) -> Strategy:
    """The strategy called ``name``; ValueError naming the known ones otherwise."""
    return lookup(STRATEGIES, name, "designer strategy")


__all__ = ["STRATEGIES", "WRITE", "Slot", "Strategy", "strategy_for"]
