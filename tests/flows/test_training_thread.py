"""In-process updates run on one thread of their own (flows.round._TRAINING): each thread that
allocates keeps its own malloc arena, and updates spread over asyncio's threads held one peak
per thread (a 3-round demo was killed for memory at 22.6 GB)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

from flows.round import _in_training_thread

WHO = contextvars.ContextVar("who", default="nobody")


def test_every_update_runs_on_the_one_training_thread_with_the_callers_context():
    def where() -> tuple[str, str]:
        return threading.current_thread().name, WHO.get()

    async def rounds() -> list[tuple[str, str]]:
        WHO.set("round flow")
        return [await _in_training_thread(where) for _ in range(3)]

    names = asyncio.run(rounds())
    assert len(set(names)) == 1
    assert names[0][0].startswith("spade-train") and names[0][1] == "round flow"
