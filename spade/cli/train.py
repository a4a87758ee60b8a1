"""``spade train``: one GRPO update from saved trajectories or scored design attempts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.table import Table

from spade.cli.common import ConfigOpt, config_or_exit, fail
from spade.errors import SpadeError


def train(
    trajectories: Annotated[
        Path,
        typer.Option(
            "--trajectories",
            "-t",
            help="trajectories.jsonl (agent) or attempts.jsonl from `spade design` (designer).",
            exists=True,
            dir_okay=False,
        ),
    ],
    config: ConfigOpt = None,
    role: Annotated[str, typer.Option(help="agent or designer.")] = "agent",
    evaluations: Annotated[
        Path | None,
        typer.Option(
            help="Designer: evaluations.jsonl from `spade evaluate` of the designed envs"
            " (rewards by the configured scoring; not needed when attempts carry 'reward').",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    checkpoints: Annotated[
        str | None,
        typer.Option(
            help="Checkpoint root URL, one for both roles: each update resumes the newest"
            " checkpoint there, whichever role wrote it (default:"
            " <storage.root>/<name>/checkpoints)."
        ),
    ] = None,
) -> None:
    """One training update; resumes the newest checkpoint and writes the next one.

    With training.ranks > 1 (engine deepspeed) it launches that many ranks, as a round's
    training stage does; under a launcher (`torchrun --nproc_per_node N .venv/bin/spade train
    ...`) it is one rank. Each rank trains on its shard of the samples; rank 0 writes and
    reports."""
    from spade.training.run import train_once

    if role not in ("agent", "designer"):
        raise fail("--role must be agent or designer")
    cfg = config_or_exit(config)
    the_role: Literal["agent", "designer"] = "agent" if role == "agent" else "designer"
    try:
        result = train_once(cfg, the_role, trajectories, checkpoints, evaluations)
    except SpadeError as exc:
        raise fail(exc) from None
    if result.rank != 0:  # under a launcher rank 0 reports for all
        return
    ranks = f" on {result.world_size} ranks" if result.world_size > 1 else ""
    table = Table(title=f"{role} update on {result.samples} samples{ranks}", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.metrics.items():
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    Console().print(table)
    Console().print(
        f"checkpoint: {result.checkpoint}"
        + (f" (parent {result.resumed_from})" if result.resumed_from else "")
    )
