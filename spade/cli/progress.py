"""A live view of a running campaign, read from its object store (no Prefect needed).

The view polls the store at most once a second: committed stages, designs accepted and
rejected so far (verdicts are written as each design is verified), and plays done (each
environment's summary is written when its plays finish). It works for a campaign running in
this process, in a worker elsewhere, or on a cluster, as long as the store is reachable.
"""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from spade.storage import CampaignStore

_POLL_S = 1.0


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
    """What is done in ``round`` so far."""
    accepted, rejected = _verdicts(cs, round)
    envs, plays = _plays(cs, round)
    return {
        "round": round,
        "done": cs.completed_stages(round),
        "accepted": accepted,
        "rejected": rejected,
        "envs_played": envs,
        "plays": plays,
    }


class CampaignProgress:
    """A rich renderable: one row per round, refreshed from the store."""

    def __init__(self, cs: CampaignStore, rounds: int, title: str = "") -> None:
        self.cs, self.rounds, self.title = cs, rounds, title
        self._rows: list[dict[str, Any]] = []
        self._polled = 0.0
        self.started = time.monotonic()

    def poll(self) -> list[dict[str, Any]]:
        if time.monotonic() - self._polled >= _POLL_S:
            found = self.cs.rounds()
            self._rows = [round_progress(self.cs, r) for r in found]
            self._polled = time.monotonic()
        return self._rows

    def __rich__(self) -> RenderableType:
        stages = self.cs.layout.stages
        table = Table(title=self.title or f"campaign {self.cs.layout.campaign_id}")
        for col in ("round", "stage", "done", "designs ok/rejected", "envs played", "plays"):
            table.add_column(col)
        for row in self.poll():
            done = row["done"]
            current = next((s for s in stages if s not in done), "complete")
            table.add_row(
                str(row["round"]),
                current,
                f"{len(done)}/{len(stages)}",
                f"[green]{row['accepted']}[/] / [red]{row['rejected']}[/]",
                str(row["envs_played"]),
                str(row["plays"]),
            )
        elapsed = Text(f"elapsed {time.monotonic() - self.started:,.0f} s", style="dim")
        total = "until stopped" if self.rounds == 0 else str(self.rounds)
        return Group(table, Text(f"rounds planned: {total}", style="dim"), elapsed)
