"""The memory stage: this round's evaluated designs join the environment memory (the designer's
examples and negatives in later rounds)."""

from __future__ import annotations

from typing import Any

from spade.curriculum.memory import EnvironmentMemory
from spade.pipeline.context import RoundContext
from spade.pipeline.keys import fingerprint
from spade.pipeline.record import StageRecord
from spade.pipeline.stage import Stage
from spade.records import DesignAttempt, EnvEvaluation
from spade.scoring.outcomes import memory_records


def remember(
    ctx: RoundContext,
    memory_state: dict[str, Any],
    attempts: list[DesignAttempt],
    evaluations: list[EnvEvaluation],
) -> dict[str, Any]:
    """Add this round's evaluated designs to the memory (FIFO-bounded); its new state. Pool
    environments are not designs and stay out (see :mod:`spade.pipeline.pool`)."""
    memory = EnvironmentMemory(ctx.config.memory)
    memory.load_state_dict(memory_state)
    memory.extend(memory_records(attempts, evaluations, ctx.round))
    state = memory.state_dict()
    rec = StageRecord(ctx, "memory", {"memory": fingerprint(memory_state)})
    rec.write_json("memory.json", state)
    rec.commit()
    return state


STAGE = Stage("memory", sections=("memory",), run=remember)
