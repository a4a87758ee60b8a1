"""``spade dashboard``: the campaign dashboard (``dashboards/app.py``, Streamlit) on a port.

Runs ``python dashboards/serve.py run dashboards/app.py --server.headless true --server.port P
-- --store S --campaign ID`` as a child process (``streamlit run`` with a warm start: the
campaign is read and the app's imports loaded before the server listens, so the first page
load does not pay for them), waits until the server answers, prints the URL, and waits; Ctrl-C
or SIGTERM stops both.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from spade.cli.common import StorageOptionsOpt, fail
from spade.cli.common import storage_options as parse_storage_options
from spade.dashboard.data import campaign_ids
from spade.storage import ObjectStore

APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"
SERVE = APP.with_name("serve.py")
READY_TIMEOUT_S = 120.0
console = Console(soft_wrap=True)  # sys.stdout as it is when printing (tests swap it)


def streamlit_command(
    campaign_id: str,
    store: str,
    port: int,
    *,
    address: str = "127.0.0.1",
    headless: bool = True,
    storage_options: str | None = None,
) -> list[str]:
    """The command line that serves ``campaign_id`` from ``store``: ``streamlit run``'s
    arguments, through ``dashboards/serve.py`` (which warms the server first)."""
    cmd = [sys.executable, str(SERVE), "run", str(APP)]
    cmd += ["--server.headless", str(headless).lower(), "--server.port", str(port)]
    cmd += ["--server.address", address, "--browser.gatherUsageStats", "false"]
    cmd += ["--client.toolbarMode", "minimal"]  # no "Deploy" button
    cmd += ["--", "--store", store, "--campaign", campaign_id]
    return cmd + (["--storage-options", storage_options] if storage_options else [])


def wait_ready(
    proc: subprocess.Popen[bytes], url: str, timeout_s: float = READY_TIMEOUT_S, poll_s: float = 0.2
) -> bool:
    """Wait until the server at ``url`` answers its health check (True), or the process ended
    or ``timeout_s`` passed (False: the URL is printed anyway, unconfirmed). The tests' and the
    dashboard benchmark's served dashboards wait here too."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:  # not listening yet: the warm-up reads the campaign first
            if httpx.get(f"{url}/_stcore/health", timeout=2).text == "ok":
                return True
        except httpx.HTTPError:
            pass
        time.sleep(poll_s)
    return False


def dashboard(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id (see `spade status`).")],
    store: Annotated[
        str, typer.Option("--store", "-s", help="Object store root (local folder or s3://...).")
    ] = "./runs",
    port: Annotated[int, typer.Option("--port", "-p", help="Port to serve on.")] = 8501,
    address: Annotated[
        str, typer.Option("--address", help="Interface to listen on (0.0.0.0: all).")
    ] = "127.0.0.1",
    storage_options: StorageOptionsOpt = None,
    open_browser: Annotated[
        bool,
        typer.Option("--open/--headless", help="Open a browser tab, or only serve (default)."),
    ] = False,
) -> None:
    """Serve the campaign dashboard: per-round charts, an environment gallery, the memory."""
    options = parse_storage_options(storage_options)
    if not APP.is_file():
        raise fail(f"{APP} is missing (the dashboard runs from a checkout of the repository)")
    try:  # an unreachable store or bad credentials: one clear error before starting a server
        objects = ObjectStore(store, options)
        known = campaign_ids(objects)
    except Exception as exc:
        raise fail(f"cannot read {store}: {exc}") from None
    if campaign_id not in known:
        listed = ", ".join(known) or "none"
        raise fail(f"no campaign {campaign_id!r} in {objects.url()}; known: {listed}")
    cmd = streamlit_command(
        campaign_id,
        store,
        port,
        address=address,
        headless=not open_browser,
        storage_options=storage_options,
    )
    host = "localhost" if address in ("127.0.0.1", "0.0.0.0") else address
    console.print(f"dashboard of campaign {campaign_id}: reading the campaign, starting the server")
    proc = subprocess.Popen(cmd)
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:  # Ctrl-C reaches streamlit too (same process group); let it shut down
        ready = wait_ready(
            proc, f"http://{'127.0.0.1' if address == '0.0.0.0' else address}:{port}"
        )
        note = "" if ready else " (not answering yet)"
        url = f"http://{host}:{port}"
        console.print(f"dashboard of campaign {campaign_id}: {url}{note}  (Ctrl-C stops it)")
        code = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        code = proc.wait(timeout=30)
    if code not in (0, -signal.SIGTERM, -signal.SIGINT):
        raise typer.Exit(code)
