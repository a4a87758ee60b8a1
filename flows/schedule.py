"""A campaign that runs for weeks: a scheduled deployment of ``spade-campaign`` whose every
tick runs the next N rounds of one named campaign (``more_rounds``), written into the
deployment file ``spade deploy --schedule CRON --campaign-id ID`` registers.

At most one run per campaign at a time: the deployment's Prefect concurrency limit is 1 (a
tick that comes while the last one still runs waits for it, ``ENQUEUE``), and the campaign's
lease in the object store is the hard guarantee (a run started any other way is refused,
naming the run that holds the campaign).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CAMPAIGN_ENTRYPOINT = "flows/campaign.py:campaign_flow"


def tick_deployment_name(campaign_id: str) -> str:
    """``campaign-<id>``: one scheduled deployment per campaign (its concurrency is per
    campaign)."""
    return f"campaign-{campaign_id}"


def tick_deployment(
    template: dict[str, Any],
    campaign_id: str,
    cron: str,
    rounds_per_tick: int,
    config: dict[str, Any] | None = None,
    work_pool: str | None = None,
    timezone: str = "UTC",
    job_variables: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The scheduled deployment of one campaign, made from the file's ``spade-campaign``
    deployment ``template`` (its work pool and config, unless ``work_pool`` or ``config`` is
    given; ``job_variables``: the pool's variables it sets, as the GPUs its runs ask for)."""
    pool = {"name": work_pool} if work_pool else dict(template["work_pool"])
    if job_variables:
        pool["job_variables"] = job_variables
    return {
        "name": tick_deployment_name(campaign_id),
        "description": f"Campaign {campaign_id!r}: its next {rounds_per_tick} round(s) at"
        f" every tick of {cron!r} ({timezone}); one run at a time.",
        "entrypoint": CAMPAIGN_ENTRYPOINT,
        "work_pool": pool,
        "parameters": {
            "config": config if config is not None else template["parameters"]["config"],
            "campaign_id": campaign_id,
            "more_rounds": rounds_per_tick,
        },
        "schedules": [{"cron": cron, "timezone": timezone, "active": True}],
        "concurrency_limit": {"limit": 1, "collision_strategy": "ENQUEUE"},
    }


def with_tick_deployment(
    prefect_file: Path,
    out: Path,
    campaign_id: str,
    cron: str,
    rounds_per_tick: int,
    config: dict[str, Any] | None = None,
    work_pool: str | None = None,
    job_variables: dict[str, Any] | None = None,
) -> Path:
    """Write ``out``: the deployments of ``prefect_file`` and the scheduled one of
    ``campaign_id`` (replacing one of that name); ``ValueError`` if the file has no
    ``spade-campaign`` deployment to take the work pool and default config from."""
    spec = yaml.safe_load(prefect_file.read_text())
    deployments = spec.get("deployments") or []
    template = next((d for d in deployments if d.get("entrypoint") == CAMPAIGN_ENTRYPOINT), None)
    if template is None:
        raise ValueError(f"{prefect_file} has no deployment of {CAMPAIGN_ENTRYPOINT}")
    tick = tick_deployment(
        template, campaign_id, cron, rounds_per_tick, config, work_pool, job_variables=job_variables
    )
    spec["deployments"] = [d for d in deployments if d.get("name") != tick["name"]] + [tick]
    spec.pop("definitions", None)  # YAML anchors, already resolved by the load
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out
