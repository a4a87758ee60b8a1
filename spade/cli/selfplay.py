"""``spade design`` and ``spade evaluate``: one batch of designs, or hinted/unhinted plays."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from spade.config import CampaignConfig, load_config
from spade.errors import ConfigError, SpadeError

if TYPE_CHECKING:  # the CLI imports the designer only when a command runs
    from spade.records import DesignAttempt

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Campaign YAML (default: built-in defaults).")
]
console = Console()


def _config(path: Path | None) -> CampaignConfig:
    try:
        return load_config(path)
    except ConfigError as exc:
        Console(stderr=True).print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _num(value: float | None, digits: int) -> str:
    """A table cell: "–" where there is nothing to show (no plays), not a made-up 0."""
    return "–" if value is None else f"{value:.{digits}f}"


def _fail(exc: SpadeError) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/] {exc}")
    return typer.Exit(2)


def design(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for designs, verdicts and hints.")
    ],
    config: ConfigOpt = None,
    regeneration: Annotated[
        int, typer.Option(min=0, help="Regeneration index (selects the active skills).")
    ] = 0,
) -> None:
    """Design one batch of environments, verify them in the sandbox and write hints."""
    from spade.workflows import run_design

    cfg = _config(config)
    try:
        attempts = asyncio.run(
            run_design(cfg, out, regeneration=regeneration, progress=console.print)
        )
    except SpadeError as exc:
        raise _fail(exc) from None
    table = Table(title=f"Designs (regeneration {regeneration})", title_justify="left")
    for col in ("slot", "try", "skill", "strategy", "result", "env / reason"):
        table.add_column(col, overflow="fold")
    for a in attempts:
        table.add_row(
            str(a.slot), str(a.attempt), a.skill, _strategy(a), _result(a),
            Text(((a.env_id if a.accepted else a.failure_reason) or "")[:120]),  # not markup
        )  # fmt: skip
    console.print(table)
    console.print(design_summary(attempts) + f"; written to {out}")


def _strategy(a: DesignAttempt) -> str:
    return f"edit {a.parent_id}" if a.strategy == "edit" else a.strategy


def _result(a: DesignAttempt) -> str:
    """accepted / the failure kind, and the first answer's failure when a repair turn ran."""
    result = "[green]accepted[/]" if a.accepted else f"[red]{a.failure_kind}[/]"
    if a.repairs:
        result += f" after {a.repairs} repair{'s' if a.repairs > 1 else ''}"
        result += f" (first: {a.first_failure_kind})"
    return result


def design_summary(attempts: list[DesignAttempt]) -> str:
    """ "A of N attempts accepted (R after a repair turn); strategy: ..." for a batch."""
    accepted = sum(a.accepted for a in attempts)
    repaired = sum(a.accepted_after_repair for a in attempts)
    strategies = Counter(a.strategy for a in attempts)
    used = ", ".join(f"{n} {s}" for s, n in sorted(strategies.items()))
    return (
        f"{accepted} of {len(attempts)} attempts accepted ({repaired} after a repair turn);"
        f" strategy: {used or 'none'}"
    )


def evaluate(
    envs: Annotated[
        list[Path],
        typer.Argument(help="Environment files (a .hint.txt beside one supplies its hint)."),
    ],
    config: ConfigOpt = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Folder for trajectories and the regret table."),
    ] = None,
) -> None:
    """Play environments with and without their hint and print the regret table."""
    from spade.workflows import run_evaluate

    missing = [p for p in envs if not p.is_file()]
    if missing:
        Console(stderr=True).print(f"[red]error:[/] no such file: {missing[0]}")
        raise typer.Exit(2)
    cfg = _config(config)
    try:
        results = asyncio.run(run_evaluate(cfg, envs, out, progress=console.print))
    except SpadeError as exc:
        raise _fail(exc) from None
    table = Table(title="Regret", title_justify="left")
    for col in (
        "environment",
        "skill",
        "unhinted win",
        "hinted win",
        "mean unhinted",
        "mean hinted",
        "regret",
        "failed plays",
    ):
        table.add_column(col)
    for path, ev in zip(envs, results, strict=True):
        table.add_row(
            Text(path.name), Text(ev.skill), f"{ev.win_rate:.2f}", _num(ev.hinted_win_rate, 2),
            _num(_mean(ev.unhinted_returns), 3), _num(_mean(ev.hinted_returns), 3),
            f"{ev.regret:.3f}", str(ev.failed_plays),
        )  # fmt: skip
    console.print(table)
    if out:
        console.print(f"trajectories and summary in {out}")
