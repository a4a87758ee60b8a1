"""Take a slot of a GPU concurrency limit as a training stage does (``flows.gpu_limit.gpu_slot``
in a task run), on the embedded Prefect server of PREFECT_HOME, with the ``spade`` entry
point's Prefect defaults (tests/flows/test_gpu_slot_leases.py kills it while it holds one).

Usage: python -m tests.flows.slot_driver hold NAME RUN [SLOTS]  (take a slot in task run RUN and
                                                            keep it: prints 'holding', until
                                                            killed; with SLOTS, the limit is
                                                            created or sized first)
       python -m tests.flows.slot_driver take NAME RUN     (take a slot and give it back: prints
                                                            'took', then 'taken N' after)
       python -m tests.flows.slot_driver free NAME         (what spade run/resume do before
                                                            round 0: prints what was given back)
       python -m tests.flows.slot_driver expire            (every lease in PREFECT_HOME's files
                                                            runs out now, as it would once its
                                                            holder stopped renewing it; no
                                                            server: prints how many)
"""

from __future__ import annotations

import os
import sys

from flows.cli import PREFECT_DEFAULTS  # imports no Prefect: its settings are read at import

for key, value in PREFECT_DEFAULTS.items():  # as the `spade` console script does
    os.environ.setdefault(key, value)

import asyncio  # noqa: E402
from uuid import UUID  # noqa: E402

from prefect import flow, get_client, get_run_logger, task  # noqa: E402
from prefect.context import TaskRunContext  # noqa: E402
from prefect.exceptions import ObjectNotFound  # noqa: E402

from flows.gpu_limit import free_lost_slots, gpu_slot, set_gpu_limit  # noqa: E402

LEASE_S = 60.0  # the shortest lease Prefect's API takes: a killed holder's slot is back in 1 min


async def _recorded(task_run_id: UUID) -> None:
    """Until the server has this task run's record (it reaches the API asynchronously), so a
    stage waiting for the slot can name its holder."""
    async with get_client() as client:
        while True:
            try:  # not there yet: look again
                await client.read_task_run(task_run_id)
                return
            except ObjectNotFound:
                await asyncio.sleep(0.5)


@task(task_run_name="{run}")
async def train(name: str, run: str, keep: bool) -> None:
    async with gpu_slot(name, get_run_logger(), lease_s=LEASE_S):
        if keep:
            context = TaskRunContext.get()
            assert context is not None
            await _recorded(context.task_run.id)
            print("holding", flush=True)
            await asyncio.Event().wait()  # until killed
        print("took", flush=True)


@flow(name="slot-driver", persist_result=False)
async def driver(name: str, run: str, keep: bool) -> None:
    await train(name, run, keep)


async def expire() -> int:
    """Every lease kept in PREFECT_HOME's files set to have run out a second ago: what the
    lease's duration does to a holder that stopped renewing it (Prefect's shortest is a
    minute), without the wait."""
    from datetime import timedelta

    from prefect.server.concurrency.lease_storage.filesystem import ConcurrencyLeaseStorage

    storage = ConcurrencyLeaseStorage()
    leases = await storage.read_active_lease_ids(limit=10_000)
    for lease_id in leases:
        await storage.renew_lease(lease_id, ttl=timedelta(seconds=-1))
    return len(leases)


async def taken(name: str) -> int:
    async with get_client() as client:
        return (await client.read_global_concurrency_limit_by_name(name)).active_slots


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "expire":
        print(f"expired {asyncio.run(expire())}", flush=True)
        sys.exit(0)
    name, *rest = args
    if command in ("hold", "take"):
        if rest[1:]:  # in this run: one embedded server start fewer than a run of its own
            asyncio.run(set_gpu_limit(name, int(rest[1])))
        asyncio.run(driver(name, rest[0], keep=command == "hold"))
        print(f"taken {asyncio.run(taken(name))}", flush=True)
    elif command == "free":
        for line in asyncio.run(free_lost_slots(name)):
            print(line, flush=True)
        print(f"taken {asyncio.run(taken(name))}", flush=True)
    else:
        raise SystemExit(f"unknown command {command!r}")
