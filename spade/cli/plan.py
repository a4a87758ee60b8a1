"""``spade plan CONFIG``: where a campaign's GPUs go and whether each has the memory it needs."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from spade.cli.common import config_or_exit, fail
from spade.errors import SpadeError


def plan(
    config: Annotated[Path, typer.Argument(help="Campaign config YAML.", exists=True)],
    gpus: Annotated[
        int | None, typer.Option(help="GPUs of the node (default: what nvidia-smi lists).")
    ] = None,
    gpu_mem: Annotated[
        float | None,
        typer.Option("--gpu-mem", help="GiB of each GPU (default: what nvidia-smi reports)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Print the GPU placement and the memory plan of CONFIG (per training rank: model
    states, buffers, activations, logits; per vLLM GPU: weights, KV cache) and exit 1 with
    the reason when it does not fit the GPUs."""
    from spade.training.memory_plan import GIB
    from spade.training.plan import check_plan, describe, gpu_memory_bytes, plan_campaign

    cfg = config_or_exit(config)
    seen = gpu_memory_bytes()
    count = gpus if gpus is not None else len(seen)
    size = int(gpu_mem * GIB) if gpu_mem is not None else min(seen, default=0)
    if count > 0 and size <= 0:
        raise fail("no GPU memory size: pass --gpu-mem GiB (nvidia-smi reports none here)")
    try:  # placement refused, or an architecture the plan cannot read
        # DeepSpeed prints its accelerator on import (its estimators'): keep stdout the plan's
        with contextlib.redirect_stdout(io.StringIO()):
            result = plan_campaign(cfg, count, size)
    except SpadeError as exc:
        raise fail(exc) from None
    console = Console(width=120)
    if as_json:
        console.print_json(json.dumps(describe(result)))
    else:
        _print(console, result, config)
    try:  # the reasons it does not fit, as the preflight check gives them
        check_plan(result)
    except SpadeError as exc:
        raise fail(exc, console=console, code=1) from None


def _print(console: Console, result: object, config: Path) -> None:
    from spade.training.memory_plan import GIB
    from spade.training.plan import CampaignPlan

    assert isinstance(result, CampaignPlan)
    arch = result.arch
    console.print(
        f"[bold]{config}[/]: {arch.model_type}, {arch.params / 1e9:.2f} B parameters,"
        f" {result.gpus} GPU(s) of {result.gpu_bytes / GIB:.0f} GiB"
    )
    console.print(result.where.describe())
    for title, lines, total in (
        (f"per training rank ({result.precision}, {result.tokens} tokens)", result.train,
         result.train_total),
        (f"per vLLM GPU (KV cache: {result.kv_tokens:,} tokens)", result.serve,
         result.serve_total),
    ):  # fmt: skip
        if not lines:
            continue
        table = Table(title=title, title_justify="left")
        table.add_column("part")
        table.add_column("GiB", justify="right")
        table.add_column("how")
        for line in lines:
            table.add_row(line.what, f"{line.bytes / GIB:.2f}", line.how)
        table.add_row("[bold]total[/]", f"[bold]{total / GIB:.2f}[/]", "")
        console.print(table)
    console.print("fits" if not result.problems else "[red]does not fit[/]")
