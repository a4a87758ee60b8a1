"""The learning benchmark's report (``bench/learning.py``): per-round means across seeds, the
arms compared paired by seed with bootstrap intervals, each arm's training budget, the tables
and the PNG. Pure functions of the rows the bench keeps per round (``learning.round_row``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from spade.stats import bootstrap_interval, interval_json, mean

ARMS = ("spade", "pool")
Runs = dict[str, dict[str, list[dict[str, Any]]]]
"""arm -> master seed (a string, as JSON keys are) -> that campaign's rows, one per round."""


def mean_of(rows: list[dict[str, Any]], key: str) -> float | None:
    return mean(r.get(key) for r in rows)


def per_round_means(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Across seeds: each round's mean of every numeric column."""
    rounds = sorted({r["round"] for rows in runs.values() for r in rows})
    keys = (
        "heldout_win_rate",
        "heldout_return",
        "reasoning_gym",
        "designer_regret",
        "designer_reward",
    )
    out = []
    for n in rounds:
        rows = [r for rows in runs.values() for r in rows if r["round"] == n]
        row = {"round": n} | {k: mean_of(rows, k) for k in (*keys, "designed_share")}
        for k in ("heldout_return", "heldout_win_rate"):  # across seeds, 95% bootstrap
            row[f"{k}_interval"] = interval_json(bootstrap_interval(present(rows, k)))
        out.append(row)
    return out


def present(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [r[key] for r in rows if r.get(key) is not None]


COMPARED = ("heldout_return", "heldout_win_rate", "reasoning_gym")
"""The held-out measures compared across seeds at the end."""


def comparison(runs: Runs) -> dict[str, Any]:
    """Per held-out measure, across seeds: each arm's last-round value and its mean over all
    rounds (less noisy than one round), each with its 95% bootstrap interval over seeds, and
    SPADE minus pool paired by seed (the same master seed: the same documents, pool draws
    and held-out tasks) with its interval. With few seeds the intervals are wide and the
    bootstrap cannot see variation the seeds did not show: read them as that."""
    seeds = sorted(set(runs["spade"]) & set(runs["pool"]), key=int)
    out: dict[str, Any] = {"seeds": seeds}
    for key in COMPARED:
        entry: dict[str, Any] = {}
        for view in ("last", "all_rounds"):
            per_arm = {arm: [_seed_value(runs[arm][s], key, view) for s in seeds] for arm in ARMS}
            diffs = [
                a - b
                for a, b in zip(per_arm["spade"], per_arm["pool"], strict=True)
                if a is not None and b is not None
            ]
            entry[view] = {arm: _summary(values) for arm, values in per_arm.items()} | {
                "spade_minus_pool": _summary(diffs)
            }
        out[key] = entry
    return out


def _seed_value(rows: list[dict[str, Any]], key: str, view: str) -> float | None:
    """One seed's value: its last round's, or its mean over every round."""
    if view == "last":
        return rows[-1].get(key) if rows else None
    return mean_of(rows, key)


def _summary(values: list[float | None]) -> dict[str, Any]:
    xs = [v for v in values if v is not None]
    return {
        "values": xs,
        "mean": mean(xs),
        "interval": interval_json(bootstrap_interval(xs)),
    }


def fmt(value: Any, digits: int = 3) -> str:
    return (
        "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    )


def print_table(data: dict[str, Any]) -> None:
    console = Console(width=max(Console().width, 120))  # a log file: columns not cut to 80
    spade, pool = data["means"]["spade"], data["means"]["pool"]
    table = Table(title="Held-out (never trained on): SPADE vs the fixed pool, mean over seeds")
    for col in (
        "round",
        "spade win",
        "pool win",
        "spade ret",
        "pool ret",
        "spade rg",
        "pool rg",
        "regret",
        "reward",
        "share",
    ):
        table.add_column(col, justify="right")
    base = data["base"]
    table.add_row(
        "base",
        fmt(base["win_rate"]),
        fmt(base["win_rate"]),
        fmt(base.get("return")),
        fmt(base.get("return")),
        fmt(base["rg"]),
        fmt(base["rg"]),
        "",
        "",
        "",
    )
    for s, p in zip(spade, pool, strict=True):
        table.add_row(
            str(s["round"]), fmt(s["heldout_win_rate"]), fmt(p["heldout_win_rate"]),
            fmt(s["heldout_return"]), fmt(p["heldout_return"]),
            fmt(s["reasoning_gym"]), fmt(p["reasoning_gym"]), fmt(s["designer_regret"]),
            fmt(s["designer_reward"]), fmt(s["designed_share"], 2),
        )  # fmt: skip
    console.print(table)
    console.print(f"designed share of the SPADE arm's episodes: {fmt(data['designed_share'], 2)}")
    console.print(comparison_table(data["comparison"]))
    if data.get("spent"):
        console.print(budget_table(data["spent"]))


def comparison_table(comp: dict[str, Any]) -> Table:
    """Across seeds: each arm's held-out measures and SPADE - pool, with 95% intervals."""
    table = Table(
        title=f"Across seeds {', '.join(comp['seeds'])}: mean [95% bootstrap interval over seeds]"
    )
    for col in ("measure", "rounds", "spade", "pool", "spade - pool"):
        table.add_column(col, justify="right")
    for key in COMPARED:
        for view, label in (("last", "last"), ("all_rounds", "mean of all")):
            cells = comp[key][view]
            table.add_row(
                key,
                label,
                *(with_interval(cells[c]) for c in ("spade", "pool", "spade_minus_pool")),
            )
    return table


def with_interval(summary: dict[str, Any]) -> str:
    interval = summary["interval"]
    bounds = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
    return fmt(summary["mean"]) + bounds


def plot(data: dict[str, Any], path: Path) -> None:
    """Held-out mean return (partial credit) of both arms per round (base at round -1): each
    seed thin, the mean of seeds thick with its 95% bootstrap band over seeds, the win rate
    dashed; and the designer's regret, reward and designed share beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    base = data["base"]
    for arm, colour in (("spade", "tab:blue"), ("pool", "tab:orange")):
        for rows in data["runs"][arm].values():
            xs = [-1, *[r["round"] for r in rows]]
            ys = [base.get("return"), *[r["heldout_return"] for r in rows]]
            left.plot(xs, ys, color=colour, alpha=0.3, lw=1, label=None)
        means = data["means"][arm]
        xs = [-1, *[m["round"] for m in means]]
        ys = [base.get("return"), *[m["heldout_return"] for m in means]]
        left.plot(xs, ys, color=colour, lw=2.5, marker="o", label=f"{arm} return (mean of seeds)")
        bands = [(m["round"], m["heldout_return_interval"]) for m in means]
        bands = [(x, iv) for x, iv in bands if iv]
        if bands:
            left.fill_between(
                [x for x, _ in bands], [iv[0] for _, iv in bands], [iv[1] for _, iv in bands],
                color=colour, alpha=0.15, lw=0,
            )  # fmt: skip
        wins = [base.get("win_rate"), *[m["heldout_win_rate"] for m in means]]
        left.plot(xs, wins, color=colour, lw=1.5, ls="--", label=f"{arm} win rate")
    left.set(
        xlabel="round (-1: base weights)",
        ylabel="held-out unhinted mean return",
        ylim=(-0.02, 1.02),
    )
    left.set_title("Held-out environments (never trained on)")
    left.legend()
    means = data["means"]["spade"]
    rounds = [m["round"] for m in means]
    right.plot(rounds, [m["designer_regret"] for m in means], marker="o", label="designer regret")
    right.plot(rounds, [m["designer_reward"] for m in means], marker="s", label="designer reward")
    share = right.twinx()
    share.bar(rounds, [m["designed_share"] or 0.0 for m in means], alpha=0.2, color="gray")
    share.set(ylabel="share of episodes on designed envs", ylim=(0, 1))
    right.set(xlabel="round", title="SPADE arm: the designer")
    right.legend(loc="upper left")
    for ax in (left, right):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def share_of(runs: dict[str, list[dict[str, Any]]]) -> float | None:
    """The share of all the SPADE arm's unhinted episodes that were played on designed envs."""
    designed = sum(r["designed_episodes"] for rows in runs.values() for r in rows)
    pool = sum(r["pool_episodes"] for rows in runs.values() for r in rows)
    return designed / (designed + pool) if designed + pool else None


TRAINED = ("agent_updates", "agent_tokens", "designer_updates", "designer_tokens")
"""The round summary's training budget per role (``spade.pipeline.summary``)."""
BUDGET = ("episodes", *TRAINED)
"""What each arm spent, summed over a campaign's rounds: the agent's unhinted episodes (what it
trains on), the optimizer steps and trained (sampled) tokens of each role's updates. The arms
are matched on the agent's; the designer's are SPADE's extra cost."""


def spent(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """One arm's budget (:data:`BUDGET`): per seed the sum over its rounds (None where a
    campaign's rows do not say: older rows, or a stage that did not commit), and the mean."""
    out: dict[str, dict[str, Any]] = {}
    for key in BUDGET:
        per_seed = []
        for rows in runs.values():
            known = [v for row in rows if (v := _spent(row, key)) is not None]
            per_seed.append(sum(known) if len(known) == len(rows) else None)
        out[key] = {"values": per_seed, "mean": mean(per_seed)}
    return out


def _spent(row: dict[str, Any], key: str) -> int | None:
    if key == "episodes":
        return (row.get("designed_episodes") or 0) + (row.get("pool_episodes") or 0)
    return row.get(key)


def budget_table(budgets: dict[str, dict[str, dict[str, Any]]]) -> Table:
    table = Table(title="Spent per campaign (sum over rounds; mean over seeds, then each seed)")
    table.add_column("arm")
    for key in BUDGET:
        table.add_column(key.replace("_", " "), justify="right")
    for arm in ARMS:
        cells = budgets.get(arm, {})
        table.add_row(arm, *(_budget_cell(cells.get(key)) for key in BUDGET))
    return table


def _budget_cell(cell: dict[str, Any] | None) -> str:
    if not cell or cell["mean"] is None:
        return "-"
    seeds = "/".join("-" if v is None else str(v) for v in cell["values"])
    return f"{cell['mean']:.0f} ({seeds})"
