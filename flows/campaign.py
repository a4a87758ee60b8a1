"""A SPADE campaign as a Prefect flow: rounds one after another, each a ``spade-round`` subflow,
carrying memory, EMA and weights through the object store, resumable by campaign id.

Re-running with the same campaign id skips the rounds whose every stage is committed and
re-enters the first incomplete round, where finished stages come back from the cache. After
each round a table artifact shows the per-round numbers and a markdown artifact links to the
stored artifacts; ``spade stop`` (or cancelling the run) ends a campaign of ``rounds: 0``.
Each round's numbers, its designs and a sample of its rollouts (as tables, read from the store)
also go to the configured W&B / TensorBoard sinks (``metrics``); with
``metrics.prometheus_port`` the round subflow (this process) serves sandbox metrics for Prometheus.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

from flows.deployments import GPU_POOL
from flows.gpu_limit import ensure_gpu_limit
from flows.round import RoundOutcome, round_flow
from flows.storage import flow_run_label
from spade.config import CampaignConfig
from spade.errors import ConfigError
from spade.inference.pool import close_shared_backends
from spade.metrics.sinks import log_round
from spade.pipeline.campaign import (
    campaign_lease,
    new_campaign_id,
    record_target,
    rounds_to_run,
    start_campaign,
    stop_requested,
)
from spade.pipeline.record import campaign_store
from spade.pipeline.summary import SUMMARY_COLUMNS, campaign_status
from spade.pipeline.tracker import round_tables
from spade.placement import check_placement, placement, visible_gpus
from spade.storage import CampaignStore


def artifact_key(campaign_id: str) -> str:
    """Prefect artifact keys are lowercase letters, digits and dashes."""
    return "".join(c if c.isalnum() else "-" for c in campaign_id.lower()).strip("-")[:90]


async def _report(cs: CampaignStore) -> dict[str, Any]:
    status = campaign_status(cs)
    columns = (*SUMMARY_COLUMNS, "agent_skipped", "designer_skipped")  # why a loss is missing
    rows = [{c: r.get(c) for c in columns} for r in status["rounds"]]
    key = artifact_key(cs.layout.campaign_id)
    await acreate_table_artifact(rows, key=f"{key}-rounds", description="SPADE rounds so far")
    links = "\n".join(
        f"- round {r['round']}: `{cs.store.url(cs.layout.round_prefix(r['round']))}`"
        for r in status["rounds"]
    )
    await acreate_markdown_artifact(
        f"# Campaign `{cs.layout.campaign_id}`\n\nArtifacts: `{status['store']}`\n\n{links}\n\n"
        f"Status: `spade status {cs.layout.campaign_id} --store {cs.store.url()}`\n\n"
        f"Dashboard: `spade dashboard {cs.layout.campaign_id} --store {cs.store.url()}`\n",
        key=f"{key}-artifacts",
        description="Where the campaign's artifacts are",
    )
    return status


@flow(name="spade-campaign", flow_run_name="{campaign_id}", persist_result=False)
async def campaign_flow(
    config: CampaignConfig,
    campaign_id: str | None = None,
    rounds: int | None = None,
    more_rounds: int | None = None,
) -> dict[str, Any]:
    """Run a campaign up to ``rounds`` rounds in all (default ``config.run.rounds``; 0: until
    stopped), or its next ``more_rounds`` rounds from wherever it is (what a schedule's tick
    runs: each tick continues the named campaign).

    ``campaign_id`` None starts a new campaign; an existing id resumes it. One run per
    campaign id at a time: a second one fails at once with a LeaseHeldError naming the first
    (its flow run, host and pid); a deployment's concurrency limit makes ticks wait instead.
    When it ends, however, the backends its rounds pooled are closed: a managed model server
    stops with the campaign.
    """
    log = get_run_logger()
    await _check_node(config, log)
    cid = campaign_id or new_campaign_id(config)
    cs = campaign_store(config, cid)
    try:  # the backends its rounds pooled go with the campaign, however it ends
        with campaign_lease(cs, config, holder=flow_run_label()):
            return await _campaign(config, cs, rounds, more_rounds)
    finally:
        # a managed vLLM or llama.cpp server runs in a session of its own: left running, it
        # would outlive this process (`spade run`, a deployment's flow run) and hold its port
        await close_shared_backends()


async def _campaign(
    config: CampaignConfig, cs: CampaignStore, rounds: int | None, more_rounds: int | None
) -> dict[str, Any]:
    """The campaign's rounds, under its lease (see :func:`campaign_flow`)."""
    log = get_run_logger()
    cid = cs.layout.campaign_id
    start_campaign(cs, config)
    r, total = rounds_to_run(cs, config, rounds, more_rounds, report=log.warning)
    record_target(cs, total)  # a resume of this run continues to the same round count
    log.info("campaign %s: continuing at round %d (%s)", cid, r, cs.store.url())
    if config.run.overlap:
        await _overlapped(config, cs, r, total)
        return await _report(cs)
    while total == 0 or r < total:
        if stop_requested(cs):
            log.info("campaign %s: stop requested; ending after round %d", cid, r - 1)
            break
        outcome = await round_flow(config, cid, r)
        await _finished(config, cs, outcome)
        r += 1
    return await _report(cs)


async def _check_node(config: CampaignConfig, log: Any) -> None:
    """What must hold before round 0 on the node this flow run landed on (a deployment's work
    pool decides which): the GPUs the config places its server and training ranks on are
    visible, and the GPU concurrency limit exists (created with one slot if missing)."""
    gpus = await asyncio.to_thread(visible_gpus)  # nvidia-smi
    try:  # too few GPUs here is most likely a deployment on the CPU pool: say which pool fits
        where = check_placement(config, gpus)
    except ConfigError as exc:
        if placement(config, gpus).needed <= gpus:
            raise
        raise ConfigError(
            f"{exc}; a config that runs on GPUs belongs on the {GPU_POOL} work pool: `spade"
            " deploy --config <its YAML>` registers a deployment of it there"
        ) from None
    if where.needed:
        log.info("campaign placement: %s", where.describe())
    name = config.run.gpu_concurrency_limit
    if name is not None:
        limit = await ensure_gpu_limit(name)
        (log.warning if limit.created else log.info)("GPU concurrency limit %s", limit.describe())


async def _finished(config: CampaignConfig, cs: CampaignStore, outcome: RoundOutcome) -> None:
    """A round is done: the campaign's artifacts and the metrics sinks hear of it."""
    await _report(cs)
    # A side channel: it logs its own problems and never fails the round.
    log = get_run_logger()
    cid, r = cs.layout.campaign_id, outcome.round_index
    # the tables are read from the store inside log_round, only when a sink is on
    tables = partial(round_tables, cs, r, config.metrics.rollout_samples, config.seed)
    await asyncio.to_thread(log_round, config, cid, r, outcome.summary, tables=tables, logger=log)


PLAYED_POLL_S = 0.25
"""How often the overlapped campaign looks whether a round's play half has committed."""


async def _overlapped(config: CampaignConfig, cs: CampaignStore, r: int, total: int) -> None:
    """Rounds ``r`` .. ``total - 1`` with one round's play half beside the previous round's
    training (``run.overlap``): round r+1 starts once round r has committed its memory stage
    (what r+1 starts from) and round r-1 has finished (r+1 serves its published weights). A
    round that fails cancels the one beside it and fails the campaign."""
    log = get_run_logger()
    cid = cs.layout.campaign_id
    flows: list[asyncio.Task[RoundOutcome]] = []  # in flight, oldest first (two at most)
    try:
        while total == 0 or r < total:
            if stop_requested(cs):
                log.info("campaign %s: stop requested; ending after round %d", cid, r - 1)
                break
            flows.append(asyncio.create_task(round_flow(config, cid, r, wait_for_parent=True)))
            await _until_played(cs, r, flows[-1])
            if len(flows) > 1:  # the round before: it trained beside this one's play half
                await _finished(config, cs, await flows.pop(0))
            r += 1
        while flows:
            await _finished(config, cs, await flows.pop(0))
    finally:
        for flow in flows:  # a failure or a cancel: the rounds still in flight stop too
            if not flow.done():
                flow.cancel()
            with contextlib.suppress(BaseException):  # their own errors are not this one's
                await flow


async def _until_played(cs: CampaignStore, r: int, flow: asyncio.Task[RoundOutcome]) -> None:
    """Wait until round ``r`` has committed its memory stage (or its flow ended: a failure is
    raised here)."""
    while "memory" not in cs.completed_stages(r):
        if flow.done():
            flow.result()  # raises the round's failure
            return
        await asyncio.sleep(PLAYED_POLL_S)


__all__ = ["artifact_key", "campaign_flow"]
