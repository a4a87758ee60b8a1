"""``spade infra env``: what infra/compose.yaml needs for a campaign config, as ``infra/.env``
lines.

The compose GPU worker runs every flow run of the ``spade-gpu`` pool as a process in its own
container, so the container must hold every GPU the config places work on: the managed vLLM
server's and the training ranks' (:mod:`spade.placement`; indices as the container numbers
them, 0 up). A Docker device request of ``count: N`` gets the host's GPUs 0 .. N-1, so
``SPADE_GPU_WORKER_GPUS`` is ``placement(cfg).needed`` (8 for the 8-GPU presets). On Kubernetes
the same count is the deployment's job variable ``gpus``, which ``spade deploy --config`` sets.
"""

from __future__ import annotations

import typer
from rich.console import Console

from spade.cli.common import ConfigOpt, config_or_exit
from spade.config import CampaignConfig
from spade.placement import placement

infra_app = typer.Typer(
    help="Settings of the cluster templates under infra/ for a campaign config.",
    no_args_is_help=True,
)
console = Console(soft_wrap=True, highlight=False)

GPU_WORKER_GPUS = "SPADE_GPU_WORKER_GPUS"
"""infra/compose.yaml's variable: how many GPUs (the host's first ones) the GPU worker gets."""


def compose_env(cfg: CampaignConfig) -> dict[str, str]:
    """The compose variables ``cfg`` needs set (none for a config that uses no GPU: the
    defaults stand)."""
    needed = placement(cfg).needed
    return {GPU_WORKER_GPUS: str(needed)} if needed else {}


def env_lines(cfg: CampaignConfig) -> list[str]:
    """``infra/.env`` lines for ``cfg``: comments saying why, then ``NAME=value``."""
    where = placement(cfg)
    if not where.needed:
        return [f"# the config {cfg.name} uses no GPU: compose's defaults stand"]
    lines = [f"# infra/.env for the config {cfg.name}: {where.describe()}"]
    lines += [f"{name}={value}" for name, value in compose_env(cfg).items()]
    if where.serve:
        lines += [
            "# the GPU worker runs its own vLLM server (inference.backend: vllm): start the stack",
            "# without compose's vllm service, which would share its GPUs:",
            "#   docker compose -f infra/compose.yaml up -d --scale vllm=0",
        ]
    lines.append(
        f"# Kubernetes: the deployment's job variable gpus={where.needed}"
        " (spade deploy --config sets it)"
    )
    return lines


@infra_app.command("env")
def env(config: ConfigOpt = None) -> None:
    """Print the infra/.env lines a config needs (`spade infra env -c PRESET >> infra/.env`)."""
    for line in env_lines(config_or_exit(config)):
        console.print(line, markup=False)
