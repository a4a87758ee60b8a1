"""Where a campaign config's deployment runs: its work pool, the GPUs its flow runs ask for, and
the deployment of one config that ``spade deploy --config`` adds to the deployment file.

A campaign flow run holds its whole round in its own process (a managed vLLM server and the
training ranks included), so the pool its deployment names decides the node it lands on. A
config whose server or training ranks run on GPUs (``spade.placement.placement(cfg).needed``
> 0: ``model.device: cuda``, the 8-GPU presets) goes to ``spade-gpu``, any other to
``spade-cpu``. Its deployment also carries the job variable ``gpus``, that count: a Kubernetes
pool (infra/work-pools/kubernetes-gpu.json) makes each flow-run Job ask for that many
``nvidia.com/gpu``; a process pool has no such variable and ignores it (its worker has the GPUs
its host or container gives it: infra/compose.yaml's ``SPADE_GPU_WORKER_GPUS``, which
``spade infra env --config`` prints).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flows.schedule import CAMPAIGN_ENTRYPOINT
from spade.config import CampaignConfig
from spade.placement import placement

CPU_POOL = "spade-cpu"
GPU_POOL = "spade-gpu"


def campaign_pool(cfg: CampaignConfig) -> str:
    """``spade-gpu`` for a config that places anything on a GPU, else ``spade-cpu``."""
    return GPU_POOL if placement(cfg).needed else CPU_POOL


def gpu_job_variables(cfg: CampaignConfig) -> dict[str, Any]:
    """The job variables of a deployment of ``cfg``: ``gpus``, the GPUs its node must have
    (none for a config without GPUs: the pool's default stands)."""
    needed = placement(cfg).needed
    return {"gpus": needed} if needed else {}


def config_deployment(
    template: dict[str, Any], cfg: CampaignConfig, work_pool: str | None = None
) -> dict[str, Any]:
    """The deployment ``<cfg.name>`` of the campaign flow with ``cfg`` as its default config,
    on ``work_pool`` (default: :func:`campaign_pool`), made from the file's campaign deployment
    ``template`` (its pull steps and the rest are the file's)."""
    pool: dict[str, Any] = {"name": work_pool or campaign_pool(cfg)}
    if variables := gpu_job_variables(cfg):
        pool["job_variables"] = variables
    return {
        "name": cfg.name,
        "description": f"A campaign of the config {cfg.name!r} (its default parameters) on"
        f" {pool['name']}; resumes by campaign id.",
        "entrypoint": template["entrypoint"],
        "work_pool": pool,
        "parameters": {"config": cfg.model_dump(mode="json")},
    }


def with_config_deployment(
    prefect_file: Path, out: Path, cfg: CampaignConfig, work_pool: str | None = None
) -> Path:
    """Write ``out``: the deployments of ``prefect_file`` and :func:`config_deployment` of
    ``cfg``; ``ValueError`` if the file has no campaign deployment to make it from, or already
    has a deployment of the campaign flow by the config's name (it would replace it)."""
    spec = yaml.safe_load(prefect_file.read_text())
    deployments = spec.get("deployments") or []
    campaigns = [d for d in deployments if d.get("entrypoint") == CAMPAIGN_ENTRYPOINT]
    if not campaigns:
        raise ValueError(f"{prefect_file} has no deployment of {CAMPAIGN_ENTRYPOINT}")
    if any(d.get("name") == cfg.name for d in campaigns):
        raise ValueError(
            f"the config's name {cfg.name!r} is a deployment of {prefect_file} already: give"
            " the config another name (its deployment is spade-campaign/<name>)"
        )
    spec["deployments"] = [*deployments, config_deployment(campaigns[0], cfg, work_pool)]
    spec.pop("definitions", None)  # YAML anchors, already resolved by the load
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out
