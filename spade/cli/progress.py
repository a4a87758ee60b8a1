"""A live view of a running campaign, read from its object store (no Prefect needed).

The view polls the store at most once a second: committed stages, designs accepted and
rejected so far (verdicts are written as each design is verified), pool environments taken, and
plays done (each environment's summary is written when its plays finish); once a round's later
stages commit, its numbers (:data:`spade.pipeline.summary.SUMMARY_COLUMNS`: win rates, regret,
the designer's reward spread, both training losses, the published weights) fill in. It works
for a campaign running in this process, in a worker elsewhere, or on a cluster, as long as the
store is reachable. A complete round's row is read once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from spade.cli.campaign import cell, design_lines
from spade.errors import StorageError
from spade.pipeline.replay import environment_rows
from spade.pipeline.summary import summarize_round
from spade.storage import CampaignStore

_POLL_S = 1.0
COLUMNS = (
    ("round", "rnd"),
    ("stage", "stage"),
    ("designs", "designs\nok/rej"),
    ("pool_envs", "\npool"),
    ("plays", "\nplays"),
    ("win_rate", "\nwin"),
    ("hinted_win_rate", "\nhint"),
    ("regret", "re-\ngret"),
    ("designer_spread", "adv\nsprd"),
    ("train_loss", "loss\nagent"),
    ("designer_loss", "loss\ndsgn"),
    ("weights", "\nwts"),
)
"""(field, two-line header) of the live table: it fits 80 columns."""


def _verdicts(cs: CampaignStore, round: int) -> tuple[int, int]:
    prefix = cs.layout.stage_prefix(round, "verify") + "/verdicts"
    accepted = rejected = 0
    for key in cs.store.list(prefix):
        try:  # a verdict being replaced right now is counted next time
            ok = not cs.store.read_json(key).get("failed_check")
        except (FileNotFoundError, ValueError):
            continue
        accepted, rejected = accepted + ok, rejected + (not ok)
    return accepted, rejected


def _plays(cs: CampaignStore, round: int) -> tuple[int, int]:
    prefix = cs.layout.stage_prefix(round, "evaluate") + "/envs"
    envs = plays = 0
    for key in cs.store.list(prefix):
        if not key.endswith("/summary.json"):
            continue
        try:  # being written right now: counted next time
            s = cs.store.read_json(key)
        except (FileNotFoundError, ValueError, json.JSONDecodeError):
            continue
        envs += 1
        plays += len(s.get("hinted_returns", [])) + len(s.get("unhinted_returns", []))
    return envs, plays


def round_progress(cs: CampaignStore, round: int) -> dict[str, Any]:
    """What is done in ``round`` so far, with the round's summary numbers committed so far."""
    accepted, rejected = _verdicts(cs, round)
    envs, plays = _plays(cs, round)
    return summarize_round(cs, round) | {
        "pool_envs": len(environment_rows(cs, round, "pool")),
        "done": cs.completed_stages(round),
        "designs_accepted": accepted,
        "designs_rejected": rejected,
        "envs_played": envs,
        "plays": plays,
    }


class CampaignProgress:
    """A rich renderable: one row per round, refreshed from the store."""

    def __init__(self, cs: CampaignStore, rounds: int, title: str = "") -> None:
        self.cs, self.rounds, self.title = cs, rounds, title
        self._rows: list[dict[str, Any]] = []
        self._complete: dict[int, dict[str, Any]] = {}
        self._polled = 0.0
        self.started = time.monotonic()

    def poll(self, fresh: bool = False) -> list[dict[str, Any]]:
        """The rows, read from the store at most once a second (every time when ``fresh``)."""
        if fresh or time.monotonic() - self._polled >= _POLL_S:
            rows = []
            previous = {row["round"]: row for row in self._rows}
            for r in self.cs.rounds():
                try:
                    row = self._complete.get(r) or round_progress(self.cs, r)
                except StorageError:  # a damaged output that a resume is about to recompute
                    if r in previous:
                        rows.append(previous[r])
                    continue
                if row["complete"]:
                    self._complete[r] = row
                rows.append(row)
            self._rows = rows
            self._polled = time.monotonic()
        return self._rows

    def _cell(self, column: str, row: dict[str, Any]) -> str:
        if column == "round":
            return str(row["round"])
        if column == "stage":
            done = row["done"]
            stages = self.cs.layout.stages
            return next((s for s in stages if s not in done), "complete")
        if column == "designs":
            return f"[green]{row['designs_accepted']}[/]/[red]{row['designs_rejected']}[/]"
        if column == "plays":
            return str(row["plays"])
        return cell(column, row)

    def __rich__(self) -> RenderableType:
        table = Table(
            title=self.title or f"campaign {self.cs.layout.campaign_id}",
            box=box.SIMPLE_HEAD,
            padding=0,
            pad_edge=False,
            show_edge=False,
        )
        for column, header in COLUMNS:
            table.add_column(header, justify="left" if column == "stage" else "right")
        for row in self.poll():
            table.add_row(*(self._cell(column, row) for column, _ in COLUMNS))
        elapsed = Text(f"elapsed {time.monotonic() - self.started:,.0f} s", style="dim")
        total = "until stopped" if self.rounds == 0 else str(self.rounds)
        designs = [Text(line) for line in design_lines(self._rows)]
        return Group(table, *designs, Text(f"rounds planned: {total}", style="dim"), elapsed)


_DETAIL: dict[str, tuple[tuple[str, str], ...]] = {
    # what a committed stage adds to its line: (row field, label)
    "verify": (("designs_accepted", "accepted"), ("designs_rejected", "rejected")),
    "pool": (("pool_envs", "pool environments"),),
    "evaluate": (
        ("plays", "plays"),
        ("win_rate", "win"),
        ("mean_return", "mean return"),
        ("hinted_win_rate", "hinted"),
    ),
    "score": (("regret", "regret"), ("designer_spread", "reward spread")),
    "train_agent": (("train_loss", "loss"),),
    "train_designer": (("designer_loss", "loss"),),
    "publish": (("weights", "weights"),),
}


class StageLog:
    """The live view as lines, for output that is not a terminal (a log file, CI, a pipe):
    a line per stage as it commits, with what it did. ``step()`` polls; call it every few
    seconds and once at the end, with ``final`` (the store is read again however recently it
    was read, so the stages that committed in the run's last second are shown)."""

    def __init__(self, view: CampaignProgress, emit: Callable[[str], None]) -> None:
        self.view, self.emit = view, emit
        self._seen: dict[int, set[str]] = {}

    def step(self, final: bool = False) -> None:
        for row in self.view.poll(fresh=final):
            seen = self._seen.setdefault(row["round"], set())
            for stage in row["done"]:
                if stage not in seen:
                    seen.add(stage)
                    self.emit(self.line(row, stage))
                    if stage == "score":  # what each accepted design became
                        for line in design_lines([row]):
                            self.emit(line)

    def line(self, row: dict[str, Any], stage: str) -> str:
        elapsed = time.monotonic() - self.view.started
        parts = [f"{label} {cell(field, row)}" for field, label in _DETAIL.get(stage, ())]
        role = {"train_agent": "agent", "train_designer": "designer"}.get(stage)
        if role and row.get(f"{role}_skipped"):  # a training stage that did not train says why
            parts = [f"not trained: {row[f'{role}_skipped']}"]
        detail = f": {', '.join(parts)}" if parts else ""
        return f"[{elapsed:5.0f} s] round {row['round']} {stage} done{detail}"
