"""Where Prefect keeps task results (on the campaign's object store, as JSON records that
:mod:`flows.results` reads back only if they are ours), which task runner maps the fan-out
stages (``run.task_runner``: threads, or a Dask cluster) and which of its workers runs a task."""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect.context import FlowRunContext
from prefect.task_runners import ThreadPoolTaskRunner

from flows.results import RemoteResults, ResultsFolder
from spade.config import CampaignConfig

RESULTS_DIR = "prefect-results"


def results_url(config: CampaignConfig) -> str:
    """``<storage.root>/prefect-results``: task results live in the same store as artifacts."""
    return f"{config.storage.root.rstrip('/')}/{RESULTS_DIR}"


async def result_storage(config: CampaignConfig) -> Any:
    """A saved storage block (Prefect needs storage blocks saved before tasks use them) that
    reads back only our JSON records: :class:`ResultsFolder` for a local folder,
    :class:`RemoteResults` for any other fsspec URL (``s3://``)."""
    url = results_url(config)
    if url.startswith("file://"):
        url = url[len("file://") :]
    block: ResultsFolder | RemoteResults
    if "://" not in url:
        path = Path(url).expanduser().resolve()
        path.mkdir(parents=True, exist_ok=True)
        url, block = str(path), ResultsFolder(basepath=str(path))
    else:
        block = RemoteResults(basepath=url, settings=dict(config.storage.storage_options))
    name = "spade-results-" + hashlib.sha256(url.encode()).hexdigest()[:12]
    await block.asave(name, overwrite=True)
    return block


def task_runner(config: CampaignConfig) -> Any:
    """Threads by default; a Dask cluster (local, or the configured scheduler) when asked."""
    if config.run.task_runner == "dask":
        from prefect_dask import DaskTaskRunner

        if config.run.dask_address:
            return DaskTaskRunner(address=config.run.dask_address)
        return DaskTaskRunner(
            cluster_kwargs={"n_workers": config.run.dask_workers, "threads_per_worker": 1}
        )
    return ThreadPoolTaskRunner(max_workers=config.run.max_parallel_tasks)


@contextlib.contextmanager
def configured_task_runner(config: CampaignConfig) -> Iterator[None]:
    """Inside a flow run: the block's mapped and submitted tasks run on the task runner
    ``config.run.task_runner`` names, started here and stopped at the end of the block.

    A flow's task runner is fixed where the flow is defined, but a deployment's flow (such as
    ``spade-round``) gets its config only as a parameter when it runs; Prefect's tasks submit
    to the flow run context's ``task_runner``, so the block runs with a copy of that context
    holding the configured one."""
    flow_run = FlowRunContext.get()
    if flow_run is None:
        raise RuntimeError("configured_task_runner is for the body of a flow run")
    with task_runner(config) as runner, flow_run.model_copy(update={"task_runner": runner}):
        yield


def task_worker() -> dict[str, str]:
    """Which worker of the task runner runs the calling task (for the stored ``ran_on``,
    :func:`spade.pipeline.worker.ran_on`): a Dask worker's address and name, else
    ``{"runner": "thread"}`` (a thread of the flow's process)."""
    if "distributed" not in sys.modules:  # no Dask worker without Dask loaded: skip the import
        return {"runner": "thread"}
    from distributed import get_worker

    try:  # ValueError: this task runs on no Dask worker (threads of a process that loaded Dask)
        worker = get_worker()
    except ValueError:
        return {"runner": "thread"}
    return {"runner": "dask", "worker": str(worker.address), "worker_name": str(worker.name)}


def flow_run_label() -> str:
    """``flow run '<name>' (<id>)``: the running flow, as a campaign's lease names its holder
    (a second run's error says which run to wait for or cancel); empty outside a flow run."""
    flow_run = FlowRunContext.get()
    if flow_run is None or flow_run.flow_run is None:
        return ""
    return f"flow run {flow_run.flow_run.name!r} ({flow_run.flow_run.id})"
