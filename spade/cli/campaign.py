"""``spade status`` and ``spade stop``: read or steer a campaign through its object store."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from spade.cli.common import StorageOptionsOpt, fail, storage_options
from spade.errors import SpadeError, StorageError
from spade.pipeline.campaign import list_campaigns, request_stop
from spade.pipeline.summary import SUMMARY_COLUMNS, campaign_status
from spade.storage import CampaignStore, ObjectStore

# soft_wrap: paths and commands stay whole (copyable); file bound now: running a flow may rebind
# sys.stdout
console = Console(soft_wrap=True)  # sys.stdout as it is when printing (tests swap it)
StoreOpt = Annotated[
    str, typer.Option("--store", "-s", help="Object store root of the campaign (storage.root).")
]
STATUS_COLUMNS = tuple(c for c in SUMMARY_COLUMNS if c not in ("designer_reward", "repaired"))
"""The columns of ``spade status`` (the rest of ``SUMMARY_COLUMNS`` is in ``--json``; repairs,
off by default and measured to rescue nothing, gave their column to the mean return)."""
# Two-line headers and short numbers keep the table within a terminal's 80 columns.
HEADERS = {
    "round": "rnd",
    "replay_of": "re-\nof",
    "attempts": "de-\nsign",
    "accepted": "\nok",
    "novel": "\nnov",
    "duplicates": "\ndup",
    "repaired": "\nrep",
    "pool_envs": "\npool",
    "win_rate": "\nwin",
    "mean_return": "\nret",
    "hinted_win_rate": "\nhint",
    "regret": "re-\ngret",
    "designer_spread": "adv\nsprd",
    "train_loss": "loss\nagent",
    "designer_loss": "loss\ndsgn",
    "heldout_win_rate": "held\nout",
    "weights": "\nwts",
}
LEGEND = (
    "rnd: round (* not complete); re-of: the round it replays; design/ok: designs",
    "tried/accepted; nov: novel; dup: rejected as copies (accepted after a repair",
    "turn: --json); pool: pool environments played; win/hint/regret: unhinted and",
    "hinted win rates, regret, over every environment played; ret: unhinted mean",
    "return (partial credit counts; a win only at full credit); adv sprd: max - min",
    "of the designer's rewards (0: no signal); wts rNa/rNd: what round N published",
    "(after its agent/designer update), served by the next round",
)
RATES = (
    "win_rate",
    "mean_return",
    "hinted_win_rate",
    "regret",
    "designer_spread",
    "heldout_win_rate",
)


def _with_campaigns(store: ObjectStore) -> ObjectStore:
    if not store.list("campaign"):
        raise fail(f"no campaigns in {store.url()}", console=console)
    return store


def status(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id (see `spade run`).")],
    store: StoreOpt = "./runs",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    options: StorageOptionsOpt = None,
) -> None:
    """Per-round numbers and the last committed stage of a campaign."""
    show_status(ObjectStore(store, storage_options(options)), campaign_id, as_json=as_json)


def show_status(store: ObjectStore, campaign_id: str, *, as_json: bool = False) -> None:
    """``spade status`` of a campaign in ``store`` (built with its storage options)."""
    objects = _with_campaigns(store)
    if campaign_id not in list_campaigns(objects):
        known = ", ".join(list_campaigns(objects)) or "none"
        raise fail(
            f"no campaign {campaign_id!r} in {objects.url()}; known: {known}", console=console
        )
    try:  # a damaged or unreachable store: say which object, no traceback
        info = campaign_status(CampaignStore(objects, campaign_id))
    except StorageError as exc:
        fail(exc, console=console)
        console.print(
            f"`spade resume {campaign_id}` verifies every committed stage and recomputes"
            " what is missing or corrupt"
        )
        raise typer.Exit(2) from None
    if as_json:
        print(json.dumps(info, indent=2))
        return
    rows = info["rounds"]
    replayed = any(row.get("replay_of") is not None for row in rows)
    columns = [c for c in STATUS_COLUMNS if c != "replay_of" or replayed]
    console.print(round_table(rows, columns, f"campaign {campaign_id}"))
    for line in (*LEGEND, *skip_notes(rows)):
        console.print(line, style="dim")
    for line in (*design_lines(rows), *health_lines(rows), *heldout_lines(rows)):
        console.print(line, markup=False, highlight=False)
    target = info.get("target_rounds")
    if target is not None:  # what the last run was asked for: a resume continues to it
        console.print(f"target: {target} rounds" if target else "target: until stopped")
    console.print(f"artifacts: {info['store']}")
    if info["last_completed"]:
        last = info["last_completed"]
        console.print(f"last committed stage: round {last['round']}, {last['stage']}")


def round_table(rows: list[dict[str, Any]], columns: list[str], title: str) -> Table:
    """The per-round table of ``spade status`` (and the live view's finished rounds)."""
    # A rule under the header and no padding: the box's blank divider is the one space
    # between columns.
    table = Table(
        title=title,
        box=box.Box("    \n    \n ── \n    \n    \n    \n    \n    \n", ascii=False),
        padding=0,
        pad_edge=False,
        show_edge=False,
    )
    for col in columns:
        table.add_column(HEADERS.get(col, col), justify="left" if col == "weights" else "right")
    for row in rows:
        table.add_row(*(cell(c, row) for c in columns))
    return table


def cell(column: str, row: dict[str, Any]) -> str:
    """One short cell: rates with 2 decimals, losses with 3 (1 from 10 up: the table keeps to
    80 columns), weights as ``rNa``/``rNd``."""
    value = row.get(column)
    if column == "round":
        return f"{value}" if row.get("complete") else f"{value}*"
    if column == "weights":
        return short_version(value)
    if value is None:
        return "-"
    if isinstance(value, float):
        if column == "designer_spread" and 0 < value < 0.005:
            return "<.01"  # a signal, however small: "0.00" would read as none
        if column in RATES:
            return f"{value:.2f}"
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3f}"
    return str(value)


def short_version(version: object) -> str:
    """``r0003-designer`` -> ``r3d``, ``r0003-agent`` -> ``r3a``; others as they are."""
    if not isinstance(version, str):
        return "-"
    head, _, role = version.partition("-")
    if head[:1] == "r" and head[1:].isdigit() and role in ("agent", "designer"):
        return f"r{int(head[1:])}{role[0]}"
    return version


def design_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Lines per design a round accepted and played: how it was asked for, its unhinted and
    hinted win rates, regret (and beside it the paired regret with its 95% interval, where the
    evaluation has one) and designer reward; then its hint; then what the checks that judge it
    as a player meets it said (informative, leaks_answer, perverse_credit, novelty)."""
    lines = []
    for row in rows:
        for d in row.get("designs_played") or []:
            how = " ".join(
                str(part)
                for part in (d.get("strategy"), d.get("parent"), d.get("directive"))
                if part
            )
            numbers = ", ".join(
                f"{label} {_number(d.get(key))}" + (_paired(d) if key == "regret" else "")
                for key, label in (
                    ("win_rate", "win"),
                    ("hinted_win_rate", "hinted"),
                    ("regret", "regret"),
                    ("reward", "designer reward"),
                )
            )
            lines.append(f"round {row['round']}: design {d['env_id']} ({how}): {numbers}")
            lines.append(f"  hint: {d.get('hint') or '(none)'}")
            lines += [f"  {name}: {_cut(why)}" for name, why in (d.get("checks") or {}).items()]
    return lines


CHECK_CHARS = 160
"""Longest check reason :func:`design_lines` prints (the whole one is in ``--json``)."""


def _cut(text: str, chars: int = CHECK_CHARS) -> str:
    return text if len(text) <= chars else text[: chars - 3] + "..."


def _paired(design: dict[str, Any]) -> str:
    """`` (paired 0.40 [0.10, 0.70])``: the paired regret and its interval; nothing without."""
    interval = design.get("paired_regret_interval")
    if design.get("paired_regret") is None or not interval:
        return ""
    return f" (paired {design['paired_regret']:.2f} [{interval[0]:.2f}, {interval[1]:.2f}])"


def health_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per training update: how far the sampler's log-probs were from the trainer's
    (k3 KL, share of ratios outside [0.5, 2]) and the share of groups without a gradient; a
    second where the update measured how far it moved the policy (``training.measure_shift``)."""
    lines = []
    for row in rows:
        for role, h in (row.get("training_health") or {}).items():
            # a figure the update recorded; no dropped replies is not worth a word
            said = ", ".join(
                form.format(h[key])
                for key, form in _HEALTH_SAID
                if key in h and (h[key] or key != "dropped_samples")
            )
            if said:
                lines.append(f"round {row['round']}: {role} update: {said}")
            if all(key in h for key in ("shift_kl", "shift_up", "shift_down")):
                lines.append(
                    f"round {row['round']}: {role} update moved the policy: KL"
                    f" {h['shift_kl']:.4f}, log-prob per token {h['shift_up']:+.3f} where the"
                    f" advantage > 0, {h['shift_down']:+.3f} where < 0"
                )
    return lines


_HEALTH_SAID = (
    ("mismatch_kl", "sampler KL {:.4f}"),
    ("mismatch_outside", "ratios outside [0.5, 2] {:.1%}"),
    ("zero_variance_groups", "groups without gradient {:.0%}"),
    ("dropped_samples", "{:.0f} replies dropped (no token ids)"),
)
"""How :func:`health_lines` says each figure, in its order."""


def heldout_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The held-out numbers of the base weights (played in round 0) and of the last round that
    played the held-out set, each with its 95% interval: where training began and where it is
    (two lines each, within 80 columns)."""
    played = [r for r in rows if r.get("heldout_mean_return") is not None]
    if not played:
        return []
    last = played[-1]
    base = next((r["heldout_base"] for r in rows if r.get("heldout_base")), None)
    lines = []
    if base and base.get("mean_return") is not None:
        lines += _heldout_pair("held-out, base weights", base)
    now = {
        "mean_return": last["heldout_mean_return"],
        "mean_return_interval": last.get("heldout_mean_return_interval"),
        "win_rate": last.get("heldout_win_rate"),
        "win_rate_interval": last.get("heldout_win_rate_interval"),
        "plays": last.get("heldout_plays"),
    }
    weights = short_version(last.get("weights"))
    return lines + _heldout_pair(f"held-out, after round {last['round']} ({weights})", now)


def _heldout_pair(title: str, summary: dict[str, Any]) -> list[str]:
    """``title (3 plays, 95% intervals):`` and ``  mean return 0.12 [0.00, 0.30], win rate
    0.00 [0.00, 0.56]``."""
    parts = []
    for key, label in (("mean_return", "mean return"), ("win_rate", "win rate")):
        interval = summary.get(f"{key}_interval")
        bounds = f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
        parts.append(f"{label} {_number(summary.get(key))}{bounds}")
    plays = f" ({summary['plays']} plays, 95% intervals)" if summary.get("plays") else ""
    return [f"{title}{plays}:", "  " + ", ".join(parts)]


def _number(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "-"


def skip_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per training stage a round skipped, with the stage's reason (an agent whose
    plays all scored the same gets zero advantages, and nothing to train: said plainly)."""
    notes = []
    for row in rows:
        for role in ("agent", "designer"):
            if row.get(f"{role}_skipped"):
                notes.append(f"round {row['round']}: {role} not trained: {row[f'{role}_skipped']}")
    return notes


def stop(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id.")],
    store: StoreOpt = "./runs",
    options: StorageOptionsOpt = None,
) -> None:
    """Ask a running campaign to stop after its current round."""
    objects = ObjectStore(store, storage_options(options))
    try:  # an unreachable store is the user's to fix
        request_stop(CampaignStore(_with_campaigns(objects), campaign_id))
    except SpadeError as exc:
        raise fail(exc, console=console) from None
    console.print(f"campaign {campaign_id}: stop requested (it ends after the current round)")
