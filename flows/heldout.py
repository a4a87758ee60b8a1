"""Held-out evaluation as its own flow (the ``spade-heldout`` deployment): play the configured
held-out environments and benchmark suites with the weights a campaign published in a given
round, on demand (the round's ``heldout`` stage, :mod:`spade.pipeline.heldout`)."""

from __future__ import annotations

from typing import Any

from prefect import flow, task

from flows.stages import BACKOFF, stage_backoff
from spade.config import CampaignConfig
from spade.metrics.prom import start_metrics_server
from spade.pipeline import heldout as heldout_stage
from spade.pipeline.context import RoundContext
from spade.pipeline.retention import check_not_pruned
from spade.pipeline.state import published_weights
from spade.records import BASE, WeightsRef


@task(name="heldout", retries=2, retry_delay_seconds=BACKOFF)
async def play_heldout(ctx: RoundContext, weights: WeightsRef) -> dict[str, Any]:
    return await heldout_stage.heldout(ctx, weights)


@flow(name="spade-heldout", flow_run_name="{campaign_id}-heldout-{round_index}")
async def heldout_flow(
    config: CampaignConfig, campaign_id: str, round_index: int = 0
) -> dict[str, Any]:
    """Held-out plays with the weights published by round ``round_index`` (base weights when
    that round published none); results go to the round's ``heldout`` stage. Weights whose
    checkpoint was pruned (``checkpoints.keep_last``) are a CheckpointError saying so."""
    start_metrics_server(config.metrics.prometheus_port)  # None: off; once per process
    ctx = RoundContext.open(config, campaign_id, round_index)
    weights = published_weights(ctx.store, round_index) or BASE
    check_not_pruned(ctx.store, weights)
    task = play_heldout.with_options(**stage_backoff(config))
    return await task(ctx.serving(weights), weights)
