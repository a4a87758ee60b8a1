"""The ``spade`` command with the orchestration commands added: ``run``, ``resume``, ``deploy``.

They live here, not in ``spade.cli``, because they start Prefect flows (``spade/`` never imports
Prefect). ``spade run`` is the main job: a campaign on the embedded default (Prefect's local
server with SQLite unless ``PREFECT_API_URL`` points elsewhere), with a live view of its
progress read from the object store.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live

from flows.schedule import tick_deployment_name, with_tick_deployment
from spade.cli import app
from spade.cli.campaign import show_status
from spade.cli.common import StorageOptionsOpt, err, fail, storage_options
from spade.cli.progress import CampaignProgress, StageLog
from spade.config import CampaignConfig, load_config
from spade.errors import SpadeError
from spade.pipeline.campaign import (
    check_not_running,
    new_campaign_id,
    recorded_target,
    saved_config,
)
from spade.pipeline.record import campaign_store
from spade.storage import ObjectStore, RunLayout

REPO_ROOT = Path(__file__).resolve().parent.parent
PREFECT_FILE = REPO_ROOT / "infra" / "prefect.yaml"
# soft_wrap: paths and commands stay whole (copyable); no file given, so it prints to sys.stdout
# as it is when printing (a console bound at import kept a stream tests had swapped out)
console = Console(soft_wrap=True)
LIVE_HELP = "Redraw a live progress table (--no-live: a line per stage as it commits)."
_LOG_POLL_S = 5.0  # how often the stage log (output that is not a terminal) reads the store


def _check_inputs(cfg: CampaignConfig) -> None:
    """Every input checked before any expensive stage: store, sandbox, corpus, model."""
    from spade.preflight import preflight

    with console.status("checking the object store, sandbox, corpus and model ..."):
        for result in preflight(cfg):
            console.print(f"  [green]ok[/] {result.name}: {result.detail}")


def _run_campaign(cfg: CampaignConfig, cid: str, rounds: int | None, live: bool) -> Any:
    from flows.campaign import campaign_flow

    cs = campaign_store(cfg, cid)
    recorded = recorded_target(cs) if rounds is None else None  # a resume: what was asked for
    total = rounds if rounds is not None else recorded if recorded is not None else cfg.run.rounds
    view = CampaignProgress(cs, total)

    async def go() -> Any:
        return await campaign_flow(config=cfg, campaign_id=cid, rounds=rounds, return_state=True)

    if not (live and console.is_terminal):  # a log, a pipe or --no-live: a line per stage
        return _with_stage_log(StageLog(view, console.print), go)
    with Live(view, console=console, refresh_per_second=2, redirect_stderr=True):
        return asyncio.run(go())


def _with_stage_log(log: StageLog, go: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run the campaign while a thread prints each stage as it commits."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(_LOG_POLL_S):
            log.step()

    watcher = threading.Thread(target=watch, name="spade-stage-log", daemon=True)
    watcher.start()
    try:
        return asyncio.run(go())
    finally:
        stop.set()
        watcher.join()
        log.step(final=True)  # the stages that committed since the last poll


def _finish(cfg: CampaignConfig, cid: str, state: Any) -> None:
    store = ObjectStore.from_config(cfg.storage)
    show_status(store, cid)
    api = os.environ.get("PREFECT_API_URL")
    ui = api.removesuffix("/api") if api else "set PREFECT_API_URL to keep runs in a Prefect UI"
    console.print(
        f"\ncampaign [bold]{cid}[/]: {state.name}\n"
        f"  artifacts:  {store.url(f'campaign/{cid}')}\n"
        f"  status:     spade status {cid} --store {cfg.storage.root}\n"
        f"  resume:     spade resume {cid} --store {cfg.storage.root}\n"
        f"  Prefect UI: {ui}"
    )
    if not state.is_completed():
        raise typer.Exit(1)


def run(
    config: Annotated[Path, typer.Option("--config", "-c", help="Campaign YAML.")],
    rounds: Annotated[
        int | None, typer.Option(help="Rounds to run (default: run.rounds; 0: until stopped).")
    ] = None,
    campaign_id: Annotated[
        str | None, typer.Option("--campaign-id", help="Id of a new campaign (default: generated).")
    ] = None,
    live: Annotated[bool, typer.Option(help=LIVE_HELP)] = True,
) -> None:
    """Run a self-play campaign (the main job)."""
    try:  # bad input of any kind is one clear error before any work starts
        cfg = load_config(config)
        _check_inputs(cfg)
    except SpadeError as exc:
        raise fail(exc) from None
    cid = campaign_id or new_campaign_id(cfg)
    try:  # a campaign id another run is working on: one clear error
        check_not_running(campaign_store(cfg, cid), cfg)
    except SpadeError as exc:
        raise fail(exc) from None
    console.print(f"campaign [bold]{cid}[/] -> {cfg.storage.root}")
    _finish(cfg, cid, _run_campaign(cfg, cid, rounds, live))


def resume(
    campaign_id: Annotated[str, typer.Argument(help="The campaign to continue.")],
    store: Annotated[str, typer.Option("--store", "-s", help="Its object store root.")] = "./runs",
    rounds: Annotated[int | None, typer.Option(help="Total rounds (default: as saved).")] = None,
    live: Annotated[bool, typer.Option(help=LIVE_HELP)] = True,
    options: StorageOptionsOpt = None,
) -> None:
    """Continue a campaign from its last committed stage, with the config it was started with
    (its store as given here: the root, and the storage options when given)."""
    given = storage_options(options)
    try:  # an unknown id or unreachable store is one clear error
        cfg = saved_config(ObjectStore(store, given), campaign_id)
        moved = {"root": store} | ({"storage_options": given} if options is not None else {})
        cfg = cfg.model_copy(update={"storage": cfg.storage.model_copy(update=moved)})
        check_not_running(campaign_store(cfg, campaign_id), cfg)
        _check_inputs(cfg)
    except SpadeError as exc:
        raise fail(exc) from None
    _finish(cfg, campaign_id, _run_campaign(cfg, campaign_id, rounds, live))


def deploy(
    prefect_file: Annotated[
        Path, typer.Option("--prefect-file", help="Deployment definitions.")
    ] = PREFECT_FILE,
    gpu_slots: Annotated[
        int, typer.Option(help="Concurrent GPU stages (the spade-gpu limit).")
    ] = 1,
    schedule: Annotated[
        str | None,
        typer.Option(
            "--schedule",
            help="Cron schedule (UTC) of a campaign that runs for weeks: each tick runs the"
            " next --rounds-per-tick rounds of --campaign-id (one run at a time).",
        ),
    ] = None,
    campaign_id: Annotated[
        str | None, typer.Option("--campaign-id", help="The campaign a --schedule continues.")
    ] = None,
    rounds_per_tick: Annotated[
        int, typer.Option("--rounds-per-tick", min=1, help="Rounds each tick of --schedule runs.")
    ] = 1,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Campaign YAML of the scheduled campaign (default: the campaign deployment's).",
        ),
    ] = None,
    work_pool: Annotated[
        str | None,
        typer.Option(
            "--work-pool",
            help="Work pool of the scheduled campaign (default: the campaign deployment's;"
            " spade-gpu when its rounds train on a GPU).",
        ),
    ] = None,
) -> None:
    """Register the campaign, round and held-out deployments with the configured Prefect server
    (with --schedule and --campaign-id, also a scheduled deployment continuing that campaign)."""
    if not os.environ.get("PREFECT_API_URL"):
        raise fail("set PREFECT_API_URL to the Prefect server to deploy to")
    if (schedule is None) != (campaign_id is None):
        raise fail("--schedule and --campaign-id go together (a schedule continues a campaign)")
    prefect = str(Path(sys.executable).with_name("prefect"))
    env = {**os.environ, "SPADE_PROJECT_DIR": str(REPO_ROOT)}
    with tempfile.TemporaryDirectory(prefix="spade-deploy-") as tmp:
        if schedule is not None and campaign_id is not None:  # checked before any registration
            prefect_file = _scheduled_file(
                prefect_file,
                Path(tmp) / "prefect.yaml",
                cron=schedule,
                campaign_id=campaign_id,
                rounds=rounds_per_tick,
                config=config,
                work_pool=work_pool,
            )
        _work_pools(prefect, env)
        _prefect_deploy(prefect, env, prefect_file)
    _gpu_limit(prefect, env, gpu_slots)
    console.print("deployments registered: spade-campaign, spade-round, spade-heldout")
    if schedule is not None and campaign_id is not None:
        console.print(
            f"campaign [bold]{campaign_id}[/]: {rounds_per_tick} round(s) at every tick of"
            f" {schedule!r} (UTC), deployment spade-campaign/{tick_deployment_name(campaign_id)}"
        )


def _work_pools(prefect: str, env: dict[str, str]) -> None:
    """Create the ``spade-cpu`` and ``spade-gpu`` process pools (an existing pool, maybe
    Kubernetes, is kept as it is)."""
    template = str(REPO_ROOT / "infra" / "work-pools" / "process.json")
    for pool in ("spade-cpu", "spade-gpu"):
        create = [prefect, "work-pool", "create", pool, "--type", "process"]
        subprocess.run(
            [*create, "--base-job-template", template],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
        )


def _prefect_deploy(prefect: str, env: dict[str, str], prefect_file: Path) -> None:
    """``prefect deploy --all`` of the file; its output and exit code if it fails."""
    cmd = [prefect, "--no-prompt", "deploy", "--all", "--prefect-file", str(prefect_file)]
    console.print("$ " + " ".join(cmd[1:]))
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        err.print(done.stdout + done.stderr)
        raise typer.Exit(done.returncode)


def _scheduled_file(
    prefect_file: Path,
    out: Path,
    *,
    cron: str,
    campaign_id: str,
    rounds: int,
    config: Path | None,
    work_pool: str | None,
) -> Path:
    """The deployment file with the scheduled campaign's deployment added; bad input (an
    invalid cron, campaign id or config) is one clear error before anything is registered."""
    from prefect.client.schemas.schedules import CronSchedule

    try:  # each of these names its problem
        CronSchedule(cron=cron, timezone="UTC")
        RunLayout(campaign_id)
        cfg = load_config(config).model_dump(mode="json") if config is not None else None
        return with_tick_deployment(prefect_file, out, campaign_id, cron, rounds, cfg, work_pool)
    except (SpadeError, ValueError) as exc:
        raise fail(exc) from None


def _gpu_limit(prefect: str, env: dict[str, str], slots: int) -> None:
    """Create the ``spade-gpu`` global concurrency limit, or set its size if it exists."""
    for verb in ("create", "update"):
        done = subprocess.run(
            [prefect, "gcl", verb, "spade-gpu", "--limit", str(slots)],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            console.print(f"GPU slots (spade-gpu): {slots}")
            return
    err.print(done.stdout + done.stderr)
    raise typer.Exit(done.returncode)


app.command("run")(run)
app.command("resume")(resume)
app.command("deploy")(deploy)


PREFECT_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    # the embedded server creates and migrates its SQLite database on start: on a busy 2-core
    # machine (a campaign and the test suite running) that took longer than Prefect's 20 s
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}
"""Prefect settings ``spade`` uses unless the environment sets them."""


def main() -> None:
    """Console entry point: the full ``spade`` app, with :data:`PREFECT_DEFAULTS`."""
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    app()


if __name__ == "__main__":
    main()
