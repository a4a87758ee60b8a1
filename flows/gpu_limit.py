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

A slot is held under a lease that the holder's process renews (Prefect's ``concurrency()``);
a process that dies stops renewing, and Prefect's repossessor service gives the slot back once
the lease runs out. Two things stop that on the embedded server (``spade run`` without
``PREFECT_API_URL``): it kept its leases in memory, lost with the killed process that started
it, and it never runs the repossessor. So ``spade`` keeps the leases in files under
PREFECT_HOME (``flows.cli.PREFECT_DEFAULTS``), and does the repossessor's work itself: a stage
waiting for a slot gives back the slots whose leases ran out (:func:`gpu_slot`), and ``spade
run``/``spade resume`` do before round 0, with the slots no lease holds at all
(:func:`free_lost_slots`). A stage that waits says so, naming the limit and the holders.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import httpx
from prefect import get_client
from prefect.client.base import ServerType
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.client.schemas.objects import ConcurrencyLeaseHolder
from prefect.concurrency.asyncio import concurrency
from prefect.context import FlowRunContext, TaskRunContext
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from prefect.settings import get_current_settings

from spade.errors import ConfigError

if TYPE_CHECKING:  # the server's lease classes are imported where leases are read
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.responses import GlobalConcurrencyLimitResponse
    from prefect.server.concurrency.lease_storage import (
        ConcurrencyLeaseStorage,
        ConcurrencyLimitLeaseMetadata,
    )
    from prefect.server.utilities.leasing import ResourceLease

    Lease = ResourceLease[ConcurrencyLimitLeaseMetadata]

DEFAULT_SLOTS = 1
"""Slots of a limit a campaign run creates: one training stage at a time, what the node's
training GPUs hold when every stage takes them all (the 8-GPU presets: GPUs 4-7)."""

LEASE_S = 300.0
"""How long a slot's lease runs past its last renewal (Prefect's default; ``concurrency()``
renews it every 75% of that): a holder whose process died keeps its slot this long at most."""

REPORT_S = 600.0
"""How often a training stage still waiting for its slot says so again (the first time after
one interval of Prefect's repossessor, 15 s): queued behind another training, it may wait for
hours."""


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
    name: str,
    log: logging.Logger | logging.LoggerAdapter[Any],
    *,
    lease_s: float = LEASE_S,
    report_s: float = REPORT_S,
) -> AsyncIterator[None]:
    """One slot of the limit ``name`` while the block runs, the limit created first if it is
    missing (said on ``log``); acquired strictly, so a limit deleted in between fails the stage
    rather than letting it run unlimited. The slot's lease names the task run holding it and
    runs ``lease_s`` past each renewal; while no slot is free, :func:`_tell_the_wait` says on
    ``log`` what the stage waits for (every ``report_s``) and gives back the slots of holders
    whose leases ran out."""
    limit = await ensure_gpu_limit(name)
    if limit.created:
        log.warning("GPU concurrency limit %s", limit.describe())
    waiting = asyncio.create_task(_tell_the_wait(name, log, report_s))
    try:
        async with concurrency(
            name, occupy=1, strict=True, lease_duration=lease_s, holder=_holder()
        ):
            await _stop(waiting)
            yield
    finally:
        await _stop(waiting)


async def free_lost_slots(name: str) -> list[str]:
    """What ``spade run`` and ``spade resume`` do before round 0 on the embedded server: give
    back the slots of ``name`` that no live process holds (their lease ran out unrenewed, or
    they have no lease at all: taken through an embedded server that kept its leases in memory,
    as before ``spade`` kept them in files); a line for each. Nothing on any other server."""
    async with get_client() as client:
        storage = _leases_here(client)
        if storage is None:
            return []
        limit = await client.read_global_concurrency_limit_by_name(name)
        lines = await _release_expired(client, storage, limit)
        unleased = await _unleased_slots(client, storage, name)
        if unleased > 0:
            await asyncio.sleep(_RECHECK_S)
            unleased = min(unleased, await _unleased_slots(client, storage, name))
        if unleased > 0:
            # the server takes no occupancy for slots whose start nobody recorded
            await client.release_concurrency_slots(
                names=[name],
                slots=unleased,
                occupancy_seconds=None,  # type: ignore[arg-type]
            )
            lines.append(
                f"{name}: gave back {unleased} slot(s) that no lease holds (taken through a"
                " Prefect server that kept its leases in memory and is gone)"
            )
    return lines


# ---- leases and the wait for a slot ----------------------------------------------------------

_RECHECK_S = 1.0
"""How long :func:`free_lost_slots` waits before counting unleased slots again: a slot is
taken a moment before its lease is written, and given back a moment before it is removed, so
only a count that stays is a lost slot."""

_MANY = 10_000  # leases read in one look: every lease of a node's limits


def _holder() -> ConcurrencyLeaseHolder | None:
    """The task run (or flow run) taking the slot, recorded in its lease so that a stage waiting
    for the slot can name it."""
    if (task := TaskRunContext.get()) is not None:
        return ConcurrencyLeaseHolder(type="task_run", id=task.task_run.id)
    if (run := FlowRunContext.get()) is not None and run.flow_run is not None:
        return ConcurrencyLeaseHolder(type="flow_run", id=run.flow_run.id)
    return None


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _tell_the_wait(
    name: str, log: logging.Logger | logging.LoggerAdapter[Any], report_s: float
) -> None:
    """Until cancelled (the slot was acquired): every pass of Prefect's repossessor interval,
    give back the slots of ``name`` whose leases ran out (the repossessor does it on a real
    server, never on the embedded one), and say what the stage waits for: at the first pass,
    then every ``report_s``."""
    every = get_current_settings().server.services.repossessor.loop_seconds
    started = time.monotonic()
    next_report = 0.0
    while True:
        await asyncio.sleep(every)
        waited = time.monotonic() - started
        try:  # a look that fails only delays a report: the wait itself is Prefect's, and goes on
            async with get_client() as client:
                limit = await client.read_global_concurrency_limit_by_name(name)
                storage = _leases_here(client)
                if waited >= next_report:
                    log.warning(await _waiting_for(client, storage, limit, waited))
                    next_report = waited + report_s
                if storage is not None:
                    for line in await _release_expired(client, storage, limit):
                        log.warning("GPU concurrency limit %s", line)
        except (httpx.HTTPError, ObjectNotFound, OSError) as exc:
            log.warning(
                "waiting for a slot of the GPU concurrency limit %s; could not look at its"
                " holders (%s: %s)",
                name,
                type(exc).__name__,
                exc,
            )


def _leases_here(client: PrefectClient) -> ConcurrencyLeaseStorage | None:
    """The leases of the server ``client`` talks to, where this process can read them: the
    embedded server's, kept in files under PREFECT_HOME (``flows.cli.PREFECT_DEFAULTS``). None
    for any other server (its leases are its own) or an embedded one keeping them in memory."""
    from prefect.server.concurrency.lease_storage import get_concurrency_lease_storage
    from prefect.server.concurrency.lease_storage.filesystem import (
        ConcurrencyLeaseStorage as LeaseFiles,
    )

    if client.server_type != ServerType.EPHEMERAL:
        return None
    storage = get_concurrency_lease_storage()
    return storage if isinstance(storage, LeaseFiles) else None


async def _leases_of(storage: ConcurrencyLeaseStorage, limit_id: UUID) -> list[Lease]:
    """The leases (current or run out) holding slots of the limit ``limit_id``."""
    ids = await storage.read_active_lease_ids(limit=_MANY)
    ids += await storage.read_expired_lease_ids(limit=_MANY)
    leases = [await storage.read_lease(lease_id) for lease_id in dict.fromkeys(ids)]
    return [lease for lease in leases if lease is not None and limit_id in lease.resource_ids]


async def _release_expired(
    client: PrefectClient, storage: ConcurrencyLeaseStorage, limit: GlobalConcurrencyLimitResponse
) -> list[str]:
    """Give back the slots of ``limit`` whose leases ran out unrenewed: what Prefect's
    repossessor service does (``prefect.server.services.repossessor``), through the API's
    release of a lease (the same decrement, and the lease removed); a line for each."""
    lines = []
    for lease in await _leases_of(storage, limit.id):
        if lease.expiration >= datetime.now(UTC):
            continue
        await client.release_concurrency_slots_with_lease(lease.id)
        slots = lease.metadata.slots if lease.metadata else 0
        lines.append(
            f"{limit.name}: gave back {slots} slot(s) of {await _who(client, lease)}, whose lease"
            f" ran out unrenewed at {_clock(lease.expiration)}: the process holding it is gone"
        )
    return lines


async def _unleased_slots(
    client: PrefectClient, storage: ConcurrencyLeaseStorage, name: str
) -> int:
    limit = await client.read_global_concurrency_limit_by_name(name)
    leases = await _leases_of(storage, limit.id)
    return limit.active_slots - sum(lease.metadata.slots for lease in leases if lease.metadata)


async def _waiting_for(
    client: PrefectClient,
    storage: ConcurrencyLeaseStorage | None,
    limit: GlobalConcurrencyLimitResponse,
    waited: float,
) -> str:
    """What a training stage waits for: the limit, its slots, who holds them and how they come
    free."""
    head = (
        f"waiting {waited:.0f} s for a slot of the GPU concurrency limit {limit.name}"
        f" ({limit.limit} slot(s), {limit.active_slots} taken); training starts when one is free"
    )
    free_by_hand = f"`prefect gcl update {limit.name} --active-slots 0`"
    if storage is None:
        return (
            f"{head}. Who holds them only the Prefect server knows (its running `train` task"
            " runs): a slot whose holder died comes back when its lease runs out, unless the"
            f" server lost its leases in a restart (infra/README.md); {free_by_hand} frees the"
            " slots once no training holds one"
        )
    leases = await _leases_of(storage, limit.id)
    held = [
        f"{await _who(client, lease)} (lease to {_clock(lease.expiration)}, given back then if"
        " its process is gone)"
        for lease in leases
    ]
    unleased = limit.active_slots - sum(lease.metadata.slots for lease in leases if lease.metadata)
    if unleased > 0:
        held.append(
            f"{unleased} slot(s) without a lease (taken through a Prefect server that kept its"
            f" leases in memory): nothing gives them back; `spade resume` does at its start,"
            f" or {free_by_hand} once no training holds one"
        )
    return f"{head}; held by {'; '.join(held)}" if held else head


async def _who(client: PrefectClient, lease: Lease) -> str:
    """The run a lease names as its holder, by name where the server has its record."""
    holder = lease.metadata.holder if lease.metadata else None
    if holder is None:
        return f"lease {lease.id} (no holder named)"
    try:  # the record of a run reaches the API asynchronously: the id is all there may be
        if holder.type == "task_run":
            task = await client.read_task_run(holder.id)
            where = await client.read_flow_run(task.flow_run_id) if task.flow_run_id else None
            return f"task run {task.name!r}" + (f" of flow run {where.name!r}" if where else "")
        if holder.type == "flow_run":
            return f"flow run {(await client.read_flow_run(holder.id)).name!r}"
    except ObjectNotFound:
        pass
    return f"{holder.type.replace('_', ' ')} {holder.id}"


def _clock(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%H:%M:%S UTC")
