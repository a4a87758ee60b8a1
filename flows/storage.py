"""Where Prefect keeps task results (on the campaign's object store, as JSON records that
:mod:`flows.results` reads back only if they are ours) and which task runner maps the fan-out
stages."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

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
