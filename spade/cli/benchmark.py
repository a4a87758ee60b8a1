"""``spade benchmark``: play the held-out suites (reasoning-gym, HumanEval, BFCL) once, now.

The same suites the campaign's ``heldout`` stage plays each round, against the configured model
(base weights), outside any campaign: a score table, and with ``--out`` a row per task and the
transcripts.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from spade.benchmarks.base import SUITE_NAMES
from spade.cli.common import ConfigOpt, config_or_exit, fail
from spade.cli.selfplay import console
from spade.config import CampaignConfig, HeldoutSuiteConfig
from spade.errors import SpadeError


def _suites(
    cfg: CampaignConfig, names: list[str], size: int | None, seed: int | None
) -> list[HeldoutSuiteConfig]:
    chosen = list(cfg.run.heldout_suites)
    if names:
        known: dict[str, HeldoutSuiteConfig] = {s.name: s for s in chosen}
        chosen = [known.get(n) or HeldoutSuiteConfig.model_validate({"name": n}) for n in names]
    if not chosen:
        chosen = [HeldoutSuiteConfig.model_validate({"name": n}) for n in SUITE_NAMES]
    update: dict[str, Any] = {k: v for k, v in (("size", size), ("seed", seed)) if v is not None}
    return [HeldoutSuiteConfig.model_validate({**s.model_dump(), **update}) for s in chosen]


async def _play(cfg: CampaignConfig, suites: list[HeldoutSuiteConfig]) -> list[Any]:
    from spade.benchmarks.runner import play_suite, suite_tasks
    from spade.inference.pool import close_shared_backends, shared_backend
    from spade.sandbox.policy import load_policy

    policy = load_policy(cfg.sandbox.policy_path)
    prepared = [suite_tasks(sc) for sc in suites]  # bad subsets fail before a model loads
    results = []
    try:
        async with shared_backend(cfg) as backend:
            for sc, ready in zip(suites, prepared, strict=True):
                console.print(f"playing {sc.name}: {len(ready[1])} tasks (seed {sc.seed})")
                results.append(await play_suite(backend, sc, cfg, policy, ready))
    finally:
        await close_shared_backends()
    return results


def _write(out: Path, results: list[Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "suites.jsonl").open("w", encoding="utf-8") as f:
        for r in results:
            f.writelines(json.dumps(row) + "\n" for row in r.rows)
    for r in results:
        with (out / f"transcripts-{r.name}.jsonl").open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(t) + "\n" for t in r.transcripts)
    summary = {r.name: r.summary() for r in results}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def benchmark(
    config: ConfigOpt = None,
    suite: Annotated[
        list[str] | None,
        typer.Option(
            "--suite",
            "-s",
            help=f"Suite to play (repeatable; {', '.join(SUITE_NAMES)})."
            " Default: run.heldout_suites of the config, else all three.",
        ),
    ] = None,
    size: Annotated[
        int | None, typer.Option(help="Tasks per suite (default: the config's).")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed of the subsets (default: the config's).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Folder for per-task rows and transcripts.")
    ] = None,
) -> None:
    """Play held-out benchmark suites with the configured model and print their scores."""
    cfg = config_or_exit(config)
    bad = [n for n in suite or [] if n not in SUITE_NAMES]
    if bad:
        raise fail(f"unknown suite {bad[0]!r}; valid: {', '.join(SUITE_NAMES)}")
    try:
        suites = _suites(cfg, list(suite or []), size, seed)
    except ValueError as exc:  # pydantic: a size or seed out of bounds
        raise fail(f"invalid --size/--seed: {exc}") from None
    try:
        results = asyncio.run(_play(cfg, suites))
    except (SpadeError, ValueError) as exc:  # ValueError: a subset the suite does not have
        raise fail(exc) from None
    table = Table(title="Held-out suites", title_justify="left")
    for col in ("suite", "score", "tasks", "failed plays"):
        table.add_column(col)
    for r in results:
        s = r.summary()
        table.add_row(r.name, f"{s['score']:.3f}", str(s["tasks"]), str(s["failed_plays"]))
    console.print(table)
    if out:
        _write(out, results)
        console.print(f"per-task rows and transcripts in {out}")
