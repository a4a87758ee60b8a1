"""``spade doctor [--gpu] CONFIG``: the config's whole GPU path checked on this node, step by
step (devices, plan, vLLM, a training step, a resume, vLLM on the trained weights)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from spade.cli.common import config_or_exit, fail
from spade.errors import SpadeError


def doctor(
    config: Annotated[Path, typer.Argument(help="Campaign config YAML.", exists=True)],
    gpu: Annotated[
        bool, typer.Option("--gpu", help="Require GPUs (refuse a node without any).")
    ] = False,
    out: Annotated[
        Path | None, typer.Option(help="Write every check's figures to this JSON file.")
    ] = None,
) -> None:
    """Run CONFIG's GPU path once on this node, about 10 minutes on a GPU node: devices and
    toolchain, the memory plan, the managed vLLM with the config's flags (one request with
    log-probs and token ids), one training step at the config's longest samples on its ranks
    (peak memory per rank beside the plan), a resume from the sharded checkpoint, vLLM
    restarted on it and the sampler/trainer mismatch. Stops at the first failure, saying why."""
    from spade.training.doctor import DoctorCheck, run_doctor

    cfg = config_or_exit(config)
    console = Console(width=120)
    checks: list[DoctorCheck] = []

    def report(check: DoctorCheck) -> None:
        checks.append(check)
        console.print(f"[green]ok[/] {check.name} ({check.seconds:.0f} s): {check.detail}")

    try:  # a failed step is reported with the checks that passed before it
        run_doctor(cfg, gpu=gpu, report=report)
    except (SpadeError, OSError, RuntimeError) as exc:
        raise fail(f"after {len(checks)} check(s): {exc}", console=console, code=1) from None
    finally:
        if out is not None:
            rows = [{"name": c.name, "detail": c.detail, "seconds": c.seconds, **c.figures}
                    for c in checks]  # fmt: skip
            out.write_text(json.dumps(rows, indent=2, default=str) + "\n", encoding="utf-8")
    console.print(f"all {len(checks)} checks passed")
