"""The ``spade`` command with the orchestration commands added: ``run``, ``resume``, ``deploy``.

They live here, not in ``spade.cli``, because they start Prefect flows (``spade/`` never imports
Prefect). ``spade run`` is the main job: a campaign on the embedded default (Prefect's local
server with SQLite unless ``PREFECT_API_URL`` points elsewhere), with a live view of its
progress read from the object store.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.live import Live

from flows.deployments import (
    CPU_POOL,
    GPU_POOL,
    campaign_pool,
    gpu_job_variables,
    with_config_deployment,
)
from flows.schedule import tick_deployment_name, with_tick_deployment
from spade.cli import app
from spade.cli.campaign import show_status
from spade.cli.common import StorageOptionsOpt, err, fail, storage_options
from spade.cli.progress import CampaignProgress, StageLog
from spade.config import CampaignConfig, load_config
from spade.errors import ConfigError, SpadeError
from spade.pipeline.campaign import (
    check_not_running,
    new_campaign_id,
    recorded_target,
    saved_config,
)
from spade.pipeline.record import campaign_store
from spade.placement import placement
from spade.storage import ObjectStore, RunLayout

if TYPE_CHECKING:  # Prefect is imported by the commands that talk to it, not by `spade --help`
    from flows.gpu_limit import GpuLimit

REPO_ROOT = Path(__file__).resolve().parent.parent
PREFECT_FILE = REPO_ROOT / "infra" / "prefect.yaml"
# soft_wrap: paths and commands stay whole (copyable); no file given, so it prints to sys.stdout
# as it is when printing (a console bound at import kept a stream tests had swapped out)
console = Console(soft_wrap=True)
LIVE_HELP = "Redraw a live progress table (--no-live: a line per stage as it commits)."
_LOG_POLL_S = 5.0  # how often the stage log (output that is not a terminal) reads the store


def _check_inputs(cfg: CampaignConfig) -> None:
    """Every input checked before any expensive stage: store, sandbox, corpus, model, and the
    GPU concurrency limit the training stages take a slot of (created with one slot if the
    Prefect server has none)."""
    from spade.preflight import preflight

    with console.status("checking the object store, sandbox, corpus and model ..."):
        for result in preflight(cfg):
            console.print(f"  [green]ok[/] {result.name}: {result.detail}")
    if cfg.run.gpu_concurrency_limit is not None:
        limit, freed = _ensure_gpu_limit(cfg.run.gpu_concurrency_limit)
        console.print(f"  [green]ok[/] GPU concurrency limit {limit.describe()}")
        for line in freed:
            console.print(f"  [yellow]freed[/] GPU concurrency limit {line}")


def _ensure_gpu_limit(name: str) -> tuple[GpuLimit, list[str]]:
    """:func:`flows.gpu_limit.ensure_gpu_limit`, then the slots of a killed run given back on
    the embedded server (:func:`flows.gpu_limit.free_lost_slots`: what it said); a Prefect
    server that does not answer is a :class:`ConfigError` naming it."""
    import httpx

    from flows.gpu_limit import ensure_gpu_limit, free_lost_slots

    async def go() -> tuple[GpuLimit, list[str]]:
        return await ensure_gpu_limit(name), await free_lost_slots(name)

    try:  # the server PREFECT_API_URL names (or the embedded one) must answer before round 0
        return asyncio.run(go())
    except httpx.HTTPError as exc:
        where = os.environ.get("PREFECT_API_URL") or "the embedded Prefect server"
        raise ConfigError(
            f"{where} did not answer ({type(exc).__name__}: {exc}) when looking up the GPU"
            f" concurrency limit {name!r} (run.gpu_concurrency_limit)"
        ) from None


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
        int,
        typer.Option(
            min=1,
            help="Concurrent training stages: the size of the spade-gpu limit (and of the"
            " --config's run.gpu_concurrency_limit).",
        ),
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
            help="Campaign YAML: without --schedule, also register spade-campaign/<its name>"
            " with it as the default config; with --schedule, the scheduled campaign's config"
            " (default: the campaign deployment's). Either runs on the pool its placement"
            " needs: spade-gpu when it uses GPUs, asking a Kubernetes pool for that many.",
        ),
    ] = None,
    work_pool: Annotated[
        str | None,
        typer.Option(
            "--work-pool",
            help="Work pool of the --config or scheduled campaign's deployment (default:"
            " spade-gpu for a --config that uses GPUs, spade-cpu for one that does not, the"
            " campaign deployment's without --config).",
        ),
    ] = None,
) -> None:
    """Register the campaign, round and held-out deployments with the configured Prefect server,
    the work pools and the GPU concurrency limit (with --config, also a deployment of that
    config on the pool it needs; with --schedule and --campaign-id, a scheduled deployment
    continuing that campaign)."""
    if not os.environ.get("PREFECT_API_URL"):
        raise fail("set PREFECT_API_URL to the Prefect server to deploy to")
    if (schedule is None) != (campaign_id is None):
        raise fail("--schedule and --campaign-id go together (a schedule continues a campaign)")
    try:  # an invalid config is one clear error before anything is registered
        cfg = load_config(config) if config is not None else None
    except SpadeError as exc:
        raise fail(exc) from None
    prefect = str(Path(sys.executable).with_name("prefect"))
    env = {**os.environ, "SPADE_PROJECT_DIR": str(REPO_ROOT)}
    with tempfile.TemporaryDirectory(prefix="spade-deploy-") as tmp:
        out = Path(tmp) / "prefect.yaml"
        if schedule is not None and campaign_id is not None:  # checked before any registration
            prefect_file = _scheduled_file(
                prefect_file,
                out,
                cron=schedule,
                campaign_id=campaign_id,
                rounds=rounds_per_tick,
                cfg=cfg,
                work_pool=work_pool,
            )
        elif cfg is not None:
            try:  # a name the file's deployments already use: one clear error, nothing registered
                prefect_file = with_config_deployment(prefect_file, out, cfg, work_pool)
            except ValueError as exc:
                raise fail(exc) from None
        _work_pools()
        _prefect_deploy(prefect, env, prefect_file)
    limits = {"spade-gpu"} | ({cfg.run.gpu_concurrency_limit} if cfg is not None else set())
    _gpu_limits(sorted(name for name in limits if name), gpu_slots)
    console.print("deployments registered: spade-campaign, spade-round, spade-heldout")
    if schedule is not None and campaign_id is not None:
        console.print(
            f"campaign [bold]{campaign_id}[/]: {rounds_per_tick} round(s) at every tick of"
            f" {schedule!r} (UTC), deployment spade-campaign/{tick_deployment_name(campaign_id)}"
        )
    elif cfg is not None:
        console.print(f"config {cfg.name}: deployment spade-campaign/{cfg.name}")
    if cfg is not None:
        console.print(f"  {_where(cfg, work_pool)}")


def _where(cfg: CampaignConfig, work_pool: str | None) -> str:
    """The pool a deployment of ``cfg`` runs on and the GPUs its flow runs ask for."""
    pool = work_pool or campaign_pool(cfg)
    gpus = gpu_job_variables(cfg).get("gpus")
    if not gpus:
        return f"work pool {pool}, no GPU"
    return (
        f"work pool {pool}, {gpus} GPU(s) per flow run ({placement(cfg).describe()}): job"
        f" variable gpus={gpus} (a Kubernetes pool asks for them); a process worker must see"
        " them (compose: `spade infra env --config` prints its SPADE_GPU_WORKER_GPUS)"
    )


def _work_pools() -> None:
    """Create the ``spade-cpu`` and ``spade-gpu`` process pools (an existing pool, maybe
    Kubernetes, is kept as it is), through Prefect's client: the server PREFECT_API_URL names."""
    import httpx

    for pool in (CPU_POOL, GPU_POOL):
        try:  # the first call to the server: say so if it does not answer
            created = asyncio.run(_create_process_pool(pool))
        except httpx.HTTPError as exc:
            raise fail(f"creating the work pool {pool!r}: {exc}") from None
        console.print(f"work pool {pool}: {'created' if created else 'kept as it is'}")


async def _create_process_pool(name: str) -> bool:
    """A process work pool ``name`` with the project's job template; False if one exists."""
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    template = json.loads((REPO_ROOT / "infra" / "work-pools" / "process.json").read_text())
    pool = WorkPoolCreate(name=name, type="process", base_job_template=template)
    async with get_client() as client:
        try:  # a pool of that name exists: kept, whatever its type
            await client.create_work_pool(pool)
        except ObjectAlreadyExists:
            return False
    return True


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
    cfg: CampaignConfig | None,
    work_pool: str | None,
) -> Path:
    """The deployment file with the scheduled campaign's deployment added (on the pool ``cfg``
    needs unless ``work_pool`` is given); bad input (an invalid cron or campaign id) is one
    clear error before anything is registered."""
    from prefect.client.schemas.schedules import CronSchedule

    try:  # each of these names its problem
        CronSchedule(cron=cron, timezone="UTC")
        RunLayout(campaign_id)
        if cfg is None:  # the campaign deployment's config and pool
            return with_tick_deployment(
                prefect_file, out, campaign_id, cron, rounds, None, work_pool
            )
        config, pool = cfg.model_dump(mode="json"), work_pool or campaign_pool(cfg)
        return with_tick_deployment(
            prefect_file, out, campaign_id, cron, rounds, config, pool, gpu_job_variables(cfg)
        )
    except (SpadeError, ValueError) as exc:
        raise fail(exc) from None


def _gpu_limits(names: list[str], slots: int) -> None:
    """Create each global concurrency limit with ``slots`` slots, or set its size if it exists
    (through Prefect's client: the server PREFECT_API_URL names)."""
    import httpx

    from flows.gpu_limit import set_gpu_limit

    for name in names:
        try:  # the server answered `prefect deploy` a moment ago; say so if it stops answering
            asyncio.run(set_gpu_limit(name, slots))
        except httpx.HTTPError as exc:
            raise fail(f"setting the concurrency limit {name!r}: {exc}") from None
        console.print(f"GPU slots ({name}): {slots}")


app.command("run")(run)
app.command("resume")(resume)
app.command("deploy")(deploy)


PREFECT_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    # the embedded server creates and migrates its SQLite database on start: on a busy 2-core
    # machine (a campaign and the test suite running) that took longer than Prefect's 20 s
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    # concurrency slots' leases in files under PREFECT_HOME, not in the embedded server's
    # memory: a killed run's server took its GPU slot's lease with it, and the slot was never
    # given back (flows/gpu_limit.py)
    "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": (
        "prefect.server.concurrency.lease_storage.filesystem"
    ),
}
"""Prefect settings ``spade`` uses unless the environment sets them."""


def main() -> None:
    """Console entry point: the full ``spade`` app, with :data:`PREFECT_DEFAULTS`."""
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    app()


if __name__ == "__main__":
    main()
