"""``spade status`` and ``spade stop``: read or steer a campaign through its object store."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from spade.errors import SpadeError
from spade.pipeline.campaign import list_campaigns, request_stop
from spade.pipeline.summary import SUMMARY_COLUMNS, campaign_status
from spade.storage import CampaignStore, ObjectStore

# soft_wrap: paths and commands stay whole (copyable); file bound now: running a flow may rebind
# sys.stdout
console = Console(file=sys.stdout, soft_wrap=True)
StoreOpt = Annotated[
    str, typer.Option("--store", "-s", help="Object store root of the campaign (storage.root).")
]
STATUS_COLUMNS = ("round", "stages_done", *SUMMARY_COLUMNS[1:])
# Two-line headers keep the table within a terminal's 80 columns (the numbers are short).
HEADERS = {
    "stages_done": "stages",
    "replay_of": "replay\nof",
    "attempts": "designs\ntried",
    "accepted": "\nok",
    "win_rate": "win\nrate",
    "hinted_win_rate": "hinted\nwin",
    "designer_reward": "design\nreward",
    "train_loss": "train\nloss",
    "heldout_win_rate": "held-\nout",
}


def _store(root: str) -> ObjectStore:
    store = ObjectStore(root)
    if not store.list("campaign"):
        console.print(f"[red]error:[/] no campaigns in {store.url()}")
        raise typer.Exit(2)
    return store


def status(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id (see `spade run`).")],
    store: StoreOpt = "./runs",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Per-round numbers and the last committed stage of a campaign."""
    objects = _store(store)
    if campaign_id not in list_campaigns(objects):
        known = ", ".join(list_campaigns(objects)) or "none"
        console.print(
            f"[red]error:[/] no campaign {campaign_id!r} in {objects.url()}; known: {known}"
        )
        raise typer.Exit(2)
    info = campaign_status(CampaignStore(objects, campaign_id))
    if as_json:
        print(json.dumps(info, indent=2))
        return
    rows = info["rounds"]
    replayed = any(row.get("replay_of") is not None for row in rows)
    columns = [c for c in STATUS_COLUMNS if c != "replay_of" or replayed]
    table = Table(
        title=f"campaign {campaign_id}",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        collapse_padding=True,
        pad_edge=False,
        show_edge=False,
    )
    for col in columns:
        table.add_column(HEADERS.get(col, col), justify="left" if col == "weights" else "right")
    for row in rows:
        done = f"{row['stages_done']}/{row['stages_total']}"
        table.add_row(*(done if c == "stages_done" else _cell(row.get(c)) for c in columns))
    console.print(table)
    console.print(f"artifacts: {info['store']}")
    if info["last_completed"]:
        last = info["last_completed"]
        console.print(f"last committed stage: round {last['round']}, {last['stage']}")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def stop(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id.")], store: StoreOpt = "./runs"
) -> None:
    """Ask a running campaign to stop after its current round."""
    try:  # an unreachable store is the user's to fix
        request_stop(CampaignStore(_store(store), campaign_id))
    except SpadeError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    console.print(f"campaign {campaign_id}: stop requested (it ends after the current round)")
