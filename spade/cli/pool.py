"""``spade pool import`` and ``spade pool export``: environment pools in and out of a store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from spade.cli.common import ConfigOpt, StorageOptionsOpt, config_or_exit, fail, storage_options
from spade.cli.env import expand_paths, load_references
from spade.config import CampaignConfig
from spade.config.pools import pool_ref
from spade.curriculum.stored import REPORT, pool_key
from spade.errors import ConfigError, SandboxError, StorageError
from spade.pools import ImportReport, export_pool, import_pool
from spade.sandbox.policy import load_policy
from spade.storage import CampaignStore, ObjectStore

pool_app = typer.Typer(help="Import and export environment pools.", no_args_is_help=True)
console = Console(soft_wrap=True)
SHOWN = 40
"""Rejections listed one by one in the terminal (all of them are in report.json)."""

StoreOpt = Annotated[
    str | None,
    typer.Option("--store", "-s", help="Object store root (default: the config's storage.root)."),
]


def _store(root: str | None, options: str | None, cfg: CampaignConfig) -> ObjectStore:
    opts = storage_options(options) if options or root else cfg.storage.storage_options
    return ObjectStore(root or cfg.storage.root, opts)


def _default_name(source: str) -> str:
    stem = Path(source.rstrip("/")).name.removesuffix(".jsonl").removesuffix(".parquet")
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in stem).lstrip("._-")[:64]


@pool_app.command("import")
def import_cmd(
    source: Annotated[
        str,
        typer.Argument(
            help="The pool: a folder of games/game_*.py (with checksums.sha256 or"
            " manifest.jsonl), .jsonl / .parquet shards, or a Hugging Face dataset folder;"
            " a local path or an fsspec URL (s3://...)."
        ),
    ],
    name: Annotated[
        str | None,
        typer.Option(help="Name of the stored pool: pool:NAME in run.env_pool (default: SRC's)."),
    ] = None,
    store: StoreOpt = None,
    options: StorageOptionsOpt = None,
    source_options: Annotated[
        str | None,
        typer.Option("--source-options", help="fsspec options of SRC as JSON (an S3 endpoint)."),
    ] = None,
    config: ConfigOpt = None,
    waive: Annotated[
        str | None,
        typer.Option(
            help="Checks whose failure does not reject, comma-separated: seed_dependence,"
            " informative, leaks_answer, perverse_credit, novelty (still run and reported as"
            " waived)."
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, max=256, help="Verified at once (default: sandbox.workers)."),
    ] = None,
    reference_paths: Annotated[
        list[Path] | None,
        typer.Option("--reference", "-r", help="Environments the novelty check compares with."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Verify every environment of a pool in the jail and store the accepted ones."""
    cfg = config_or_exit(config)
    objects = _store(store, options, cfg)
    pool_name = name or _default_name(source)
    try:  # bad --waive or --name: the user's to fix
        pool_ref(f"pool:{pool_name}")
        verify = cfg.sandbox.verify.model_validate(
            cfg.sandbox.verify.model_dump() | {"waive": _split(waive)}
        )
        policy = load_policy(cfg.sandbox.policy_path)
    except (ValueError, ConfigError) as exc:
        raise fail(exc) from None
    refs = load_references(expand_paths(reference_paths)) if reference_paths else []
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(f"verifying {pool_name}", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        try:  # a missing pool, an unusable sandbox or store: one line, exit 2
            report = import_pool(
                source,
                objects,
                pool_name,
                policy=policy,
                config=verify,
                workers=workers or cfg.sandbox.workers,
                source_options=storage_options(source_options),
                references=[ref for _, ref in refs],
                progress=progress,
            )
        except (ConfigError, SandboxError, StorageError) as exc:
            raise fail(exc) from None
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_report(report, objects.url(pool_key(pool_name, REPORT)))
    raise typer.Exit(0 if report.accepted else 1)


def _split(text: str | None) -> list[str]:
    return [w.strip() for w in (text or "").split(",") if w.strip()]


def _print_report(report: ImportReport, where: str) -> None:
    console.print(
        f"pool [bold]{escape(report.pool)}[/] ({escape(report.layout)}): {report.accepted} of"
        f" {report.total} accepted, {report.rejected} rejected in {report.seconds:.1f}s"
    )
    if report.waived:
        waived = ", ".join(f"{k} {v}" for k, v in report.waived.items())
        console.print(f"accepted with a waived check: {waived}")
    if report.by_kind:
        table = Table(title="rejected, by failure kind", title_justify="left")
        table.add_column("kind")
        table.add_column("count", justify="right")
        for kind, count in report.by_kind.items():
            table.add_row(kind, str(count))
        console.print(table)
    for r in report.rejections[:SHOWN]:
        check = f" [{r.check}]" if r.check else ""
        console.print(f"  {escape(r.name)}: {r.kind}{escape(check)}: {escape(r.reason)}")
    if report.rejected > SHOWN:
        console.print(f"  ... and {report.rejected - SHOWN} more")
    console.print(f"report: {where}")
    console.print(f"train on it: run.env_pool: pool:{report.pool} (with run.env_source: pool)")


@pool_app.command("export")
def export_cmd(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="New folder to write the pool to.")],
    store: StoreOpt = None,
    options: StorageOptionsOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Write a campaign's accepted environments as a pool (games/, manifest.jsonl,
    checksums.sha256, a Hugging Face dataset)."""
    objects = _store(store, options, config_or_exit(config))
    try:  # an unknown campaign, a non-empty folder, an unreachable store: one line
        summary = export_pool(CampaignStore(objects, campaign_id), out)
    except (ConfigError, StorageError) as exc:
        raise fail(exc) from None
    console.print(
        f"{summary.environments} environments of campaign {escape(campaign_id)} (rounds"
        f" {', '.join(map(str, summary.rounds))}) written to {escape(str(out))}"
    )
