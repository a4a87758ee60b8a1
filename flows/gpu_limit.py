"""The GPU concurrency limit (``run.gpu_concurrency_limit``): made sure of before round 0, held
by every training stage.

A Prefect global concurrency limit must exist before a slot of it is taken: the ``train`` task
acquires strictly, since a limit Prefect skips silently would let two trainings share GPUs.
``spade deploy`` creates ``spade-gpu`` with ``--gpu-slots`` slots on a cluster. A campaign run
without that (``spade run`` on a fresh Prefect server, a deployment on a server whose limit was
deleted) creates the missing limit with :data:`DEFAULT_SLOTS` slot and says so, before round 0,
instead of failing at the first training after a whole round of design and plays. A limit of
0 slots is refused at the same point: no training stage could ever start. An inactive limit
is Prefect's way of switching limiting off; it is reported, not changed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from prefect import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.asyncio import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

from spade.errors import ConfigError

DEFAULT_SLOTS = 1
"""Slots of a limit a campaign run creates: one training stage at a time, what the node's
training GPUs hold when every stage takes them all (the 8-GPU presets: GPUs 4-7)."""


@dataclass(frozen=True)
class GpuLimit:
    """A global concurrency limit as the server holds it, and whether this call created it."""

    name: str
    slots: int
    active: bool
    created: bool

    def describe(self) -> str:
        if self.created:
            return (
                f"{self.name}: created with {self.slots} slot (one training stage at a time;"
                f" `spade deploy --gpu-slots N` or `prefect gcl update {self.name} --limit N`"
                " sets another size)"
            )
        if not self.active:
            return f"{self.name}: {self.slots} slot(s), inactive (training stages are not limited)"
        return f"{self.name}: {self.slots} slot(s)"


async def ensure_gpu_limit(name: str) -> GpuLimit:
    """The limit ``name``, created with :data:`DEFAULT_SLOTS` slot if the server has none;
    :class:`ConfigError` if it is active with 0 slots."""
    created = False
    async with get_client() as client:
        try:  # absent: created below
            limit = await client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            try:  # another run (an overlapped round's training) may create it first: same limit
                await client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=DEFAULT_SLOTS)
                )
                created = True
            except ObjectAlreadyExists:
                pass
            limit = await client.read_global_concurrency_limit_by_name(name)
    if limit.active and limit.limit < 1:
        raise ConfigError(
            f"the Prefect global concurrency limit {name!r} (run.gpu_concurrency_limit) has 0"
            " slots: no training stage could start; give it slots (`spade deploy --gpu-slots"
            f" N`, `prefect gcl update {name} --limit N`)"
        )
    return GpuLimit(name, limit.limit, bool(limit.active), created)


async def set_gpu_limit(name: str, slots: int) -> None:
    """Create the limit ``name`` with ``slots`` slots, or set its size if it exists."""
    async with get_client() as client:
        await client.upsert_global_concurrency_limit_by_name(name, slots)


@asynccontextmanager
async def gpu_slot(
    name: str, log: logging.Logger | logging.LoggerAdapter[Any]
) -> AsyncIterator[None]:
    """One slot of the limit ``name`` while the block runs, the limit created first if it is
    missing (said on ``log``); acquired strictly, so a limit deleted in between fails the stage
    rather than letting it run unlimited."""
    limit = await ensure_gpu_limit(name)
    if limit.created:
        log.warning("GPU concurrency limit %s", limit.describe())
    async with concurrency(name, occupy=1, strict=True):
        yield
