"""Rendering verdicts for people (rich tables) and for machines (JSON lines).

Reasons, class names and skills come from the design (an exception message, a class
attribute): they are shown as plain text, never read as rich markup, where ``[/]`` in a
design's exception would raise MarkupError and end ``spade env check`` with a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from spade.records import Verdict


def verdict_json(path: Path, verdict: Verdict) -> str:
    return json.dumps({"path": str(path), **verdict.to_dict()}, ensure_ascii=False)


def verdict_table(path: Path, verdict: Verdict) -> Group:
    status = "[green]ACCEPTED[/]" if verdict.accepted else "[red]REJECTED[/]"
    who = f"{verdict.class_name or '?'}" + (f" · {verdict.skill}" if verdict.skill else "")
    header = Text.from_markup(
        f"[bold]{escape(str(path))}[/]  {status}  {escape(who)}  ({verdict.seconds:.2f}s)"
    )
    table = Table()
    table.add_column("check")
    table.add_column("", justify="center")
    table.add_column("reason", overflow="fold")
    for c in verdict.checks:
        mark = "[green]✓[/]" if c.passed else f"[red]✗ {c.kind}[/]"
        mark = f"[yellow]waived {c.kind}[/]" if c.waived else mark
        table.add_row(c.name, mark, Text(c.reason))
    return Group(header, table)


def summary_table(results: list[tuple[Path, Verdict]]) -> Table:
    table = Table(title="Verification summary", title_justify="left")
    for col in ("environment", "class", "skill", "verdict", "failed check", "time"):
        table.add_column(col)
    for path, v in results:
        verdict = (
            "[green]accepted[/]"
            if v.accepted
            else f"[red]{v.failure.kind if v.failure else 'rejected'}[/]"
        )
        table.add_row(
            Text(path.name),
            Text(v.class_name or "-"),
            Text(v.skill or "-"),
            verdict,
            v.failed_check or "-",
            f"{v.seconds:.2f}s",
        )
    accepted = sum(v.accepted for _, v in results)
    table.caption = f"{accepted}/{len(results)} accepted"
    return table


def print_traceback(console: Console, verdict: Verdict) -> None:
    for c in verdict.checks:
        if not c.passed and c.traceback:
            console.print(f"[dim]{c.traceback}[/]", highlight=False, markup=False)
