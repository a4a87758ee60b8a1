"""What the strategies' tests share: a slot as the designer builds it, a fresh attempt, and a
backend on the OpenAI stand-in (tests.designer.test_design_batch's server and script)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

from spade.config import CampaignConfig
from spade.curriculum.memory import EnvironmentMemory
from spade.designer.strategies import Slot
from spade.inference.base import Backend
from spade.inference.factory import open_backend
from spade.records import DesignAttempt

MATH = "mathematical_reasoning"
DOC = "Cedar trees grow slowly: a cedar adds about 30 centimetres a year in its first decade."


def slot_of(
    cfg: CampaignConfig,
    memory: EnvironmentMemory,
    *,
    skill: str = MATH,
    text: str = DOC,
    seed: str = "0:0:0:0:0",
) -> Slot:
    """The slot the designer prepares for ``skill`` on ``text``, its rng seeded by ``seed``."""
    d = cfg.designer
    return Slot(text, skill, d.mode == "tool_use", random.Random(seed), memory, d)


def fresh(skill: str = MATH) -> DesignAttempt:
    """An attempt as the designer creates it, before a strategy prepares it."""
    return DesignAttempt(slot=0, attempt=0, skill=skill, doc_id="doc00", messages=[])


def with_backend(cfg: CampaignConfig, step: Callable[[Backend], Awaitable[Any]]) -> Any:
    """``step`` run against the configured backend (the stand-in server's)."""

    async def go() -> Any:
        async with open_backend(cfg) as backend:
            return await step(backend)

    return asyncio.run(go())
