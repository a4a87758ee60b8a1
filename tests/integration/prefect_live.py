"""Real Prefect components on loopback for integration tests: a server, a process worker,
deployments made from source, runs started through the CLI, and a headless Chromium.

Everything runs as subprocesses of the test process, the way an operator runs them:

    prefect server start --host 127.0.0.1 --port <free>     (own PREFECT_HOME, SQLite there)
    prefect work-pool create <pool> --type process --overwrite
    prefect worker start --pool <pool> --type process
    prefect deployment run <flow>/<deployment> --params '{...}'

Fixtures (re-exported by tests/integration/conftest.py, so tests there just name them; from
elsewhere, `from tests.integration.prefect_live import prefect_server  # noqa: F401`):

    prefect_server   session  a running `PrefectServer` (15-45 s to start here, by load)
    prefect_worker   session  a `PrefectWorker` polling the process pool `LIVE_POOL`
    prefect_client   function a `SyncPrefectClient` on that server
    browser          function a headless Chromium (playwright `Browser`), see `open_browser`

Example:

    def test_deployment(prefect_server, prefect_worker, prefect_client, tmp_path):
        dep_id = deploy_flow(prefect_server, "tests/integration/live_flows/hello.py:hello",
                             name="t", pool=prefect_worker.pool)
        run_id = run_deployment_cli(prefect_server, "live-hello/t", {"out_path": "..."})
        run = wait_for_flow_run(prefect_client, run_id, timeout=90)
        assert run.state.is_completed()

Helpers: `deploy_flow`, `run_deployment_cli`, `wait_for_flow_run`, `wait_for_flow_runs`,
`wait_for_task_runs` (task-run records arrive asynchronously),
`open_browser`, and for the UI `ui_custom_run` / `ui_form_field` (the selectors that work on
Prefect 3.9's UI are documented there). `PrefectServer.cli(...)` runs any `prefect` command
against the server; `server.log_path` / `worker.log()` help failure messages.

The server keeps SQLite; under concurrent writers SQLite answers "database is locked", which
the API returns as a 503. Prefect's Python client (CLI, worker, flow runs) retries those; the
UI does not, so `ui_custom_run` resubmits on a 503.

Nothing here imports prefect or playwright at module import time (conftest imports this).
Servers and workers run in their own sessions (process groups); stopping one terminates the
whole group, then kills whatever is left, so no process outlives its context manager.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import pytest

from spade.processes import free_port, stop_process_group
from spade.testing.processes import CHROMIUM, chromium
from tests.prefect_db import seed_home

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.objects import FlowRun

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
PREFECT_BIN = VENV_BIN / "prefect"
LIVE_POOL = "live-process"

# Settings every client, worker and server subprocess gets (on top of PREFECT_HOME/API_URL).
_QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # else "database is locked" noise (SQLite)
    "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",
    "PREFECT_CLI_COLORS": "false",
    "PREFECT_CLI_WRAP_LINES": "false",
    "PREFECT_CLI_PROMPT": "false",
    "PREFECT_WORKER_QUERY_SECONDS": "1",  # default 10 s: a run would wait that long to start
    "PREFECT_RUNNER_POLL_FREQUENCY": "1",
    "PREFECT_LOGGING_LEVEL": "INFO",
    "COLUMNS": "250",  # rich wraps CLI output at the terminal width
    "PYTHONUNBUFFERED": "1",
}


def _clean_environ() -> dict[str, str]:
    """The test process's environment without any PREFECT_* setting (a profile, an API URL or
    the test harness's ephemeral settings must not leak into the live components)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}


def _tail(path: Path, chars: int = 6000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as exc:
        return f"<no log: {exc}>"


class _LiveProcess:
    """A Prefect component run as a subprocess in a session of its own, its output appended to
    ``log_path``: launched, waited on until it is ready, stopped with its whole group."""

    what: ClassVar[str]  # how errors name it ("prefect server")
    log_path: Path
    startup_timeout: float
    _proc: subprocess.Popen[bytes] | None

    def start(self) -> Self:
        raise NotImplementedError

    def _launch(self, cmd: list[str], env: dict[str, str], cwd: Path) -> None:
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_until(self, ready: Callable[[], bool], not_ready: str) -> None:
        """Poll ``ready`` until it holds; RuntimeError if the process exits first, TimeoutError
        (``not_ready`` and the timeout) after ``startup_timeout``, each with the log's tail."""
        assert self._proc is not None, "launch it first"
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self._proc.poll() is not None:
                msg = f"{self.what} exited with {self._proc.returncode}"
                self.stop()
                raise RuntimeError(f"{msg}; its log:\n{_tail(self.log_path)}")
            if ready():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"{not_ready} {self.startup_timeout:.0f} s; its log:\n{_tail(self.log_path)}"
                )
            time.sleep(0.25)

    def stop(self) -> None:
        if self._proc is not None:
            stop_process_group(self._proc)
            self._proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PrefectServer(_LiveProcess):
    """`prefect server start` on 127.0.0.1 with its own PREFECT_HOME (SQLite DB inside).

    `url` is the UI root, `api_url` the API (`<url>/api`), `env` what a client or worker
    subprocess needs, `log_path` the server's combined output.
    """

    what = "prefect server"
    # Background services a short test does not need; each one is another SQLite writer,
    # and concurrent writers are what makes SQLite answer "database is locked" (a 503).
    # Pass extra_env={"PREFECT_SERVER_SERVICES_<NAME>_ENABLED": "true"} to turn one back on.
    IDLE_SERVICES: ClassVar[dict[str, str]] = {
        f"PREFECT_SERVER_SERVICES_{name}_ENABLED": "false"
        for name in ("LATE_RUNS", "PAUSE_EXPIRATIONS", "REPOSSESSOR", "FOREMAN")
    }

    def __init__(
        self,
        home: Path,
        port: int | None = None,
        startup_timeout: float = 90.0,
        extra_env: Mapping[str, str] | None = None,
    ):
        self.home = Path(home)
        self.extra_env = {**self.IDLE_SERVICES, **(extra_env or {})}
        self.port = port or free_port()
        self.startup_timeout = startup_timeout
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.url}/api"
        self.log_path = self.home / "server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """Full environment for a subprocess talking to this server (CLI, worker, flow)."""
        return {
            **_clean_environ(),
            **_QUIET_ENV,
            "PREFECT_HOME": str(self.home),
            "PREFECT_PROFILES_PATH": str(self.home / "profiles.toml"),
            "PREFECT_API_URL": self.api_url,
            "PREFECT_UI_URL": self.url,
            "PREFECT_SERVER_UI_API_URL": self.api_url,  # the UI's JS calls this (default :4200)
            "PREFECT_SERVER_UI_ENABLED": "true",
            "PREFECT_SERVER_LOG_RETRYABLE_ERRORS": "true",  # the cause of a 503, in the log
        }

    def start(self) -> PrefectServer:
        import httpx

        seed_home(self.home)  # its database already migrated (tests/prefect_db.py)
        env = {**self.env, **self.extra_env}
        del env["PREFECT_API_URL"]  # the server itself must not act as a client of itself
        cmd = [str(PREFECT_BIN), "server", "start", "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port)]
        self._launch(cmd, env, self.home)

        def healthy() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{self.api_url}/health", timeout=2).status_code == 200
            return False  # not answering yet

        self._wait_until(healthy, "prefect server not healthy after")
        return self

    def client(self) -> SyncPrefectClient:
        """A sync client on this server (use as a context manager); it does not depend on the
        test process's Prefect settings."""
        from prefect.client.orchestration import SyncPrefectClient

        return SyncPrefectClient(api=self.api_url)

    def cli(self, *args: str, timeout: float = 120.0, check: bool = True) -> str:
        """Run `prefect <args>` against this server; returns stdout (raises with both streams
        if it fails and `check`)."""
        proc = subprocess.run(
            [str(PREFECT_BIN), *args],
            env=self.env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"prefect {' '.join(args)} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc.stdout

    def ui(self, path: str = "/") -> str:
        """A (v1) UI address, e.g. ui(f"/deployments/deployment/{id}")."""
        return self.url + path


class PrefectWorker(_LiveProcess):
    """`prefect worker start --pool <pool> --type process`, after creating that pool with
    `prefect work-pool create <pool> --type process --overwrite` (idempotent)."""

    what = "prefect worker"

    def __init__(
        self,
        server: PrefectServer,
        pool: str = LIVE_POOL,
        name: str | None = None,
        startup_timeout: float = 60.0,
        extra_env: Mapping[str, str] | None = None,
    ):
        self.server = server
        self.pool = pool
        self.name = name or f"live-worker-{uuid.uuid4().hex[:8]}"
        self.startup_timeout = startup_timeout
        self.extra_env = dict(extra_env or {})
        self.log_path = server.home / f"{self.name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrefectWorker:
        self.server.cli("work-pool", "create", self.pool, "--type", "process", "--overwrite")
        cmd = [str(PREFECT_BIN), "worker", "start", "--pool", self.pool, "--type", "process"]
        cmd += ["--name", self.name]
        self._launch(cmd, {**self.server.env, **self.extra_env}, REPO_ROOT)
        # Ready once it has sent its first heartbeat (it registers itself with the pool).
        with self.server.client() as client:

            def registered() -> bool:
                workers = client.read_workers_for_work_pool(self.pool)
                return any(w.name == self.name for w in workers)

            self._wait_until(registered, f"worker {self.name} did not register within")
        return self

    def log(self) -> str:
        return _tail(self.log_path, 20000)


_DEPLOY_SCRIPT = """
import json, sys
from prefect import flow
spec = json.loads(sys.argv[1])
f = flow.from_source(source=spec["source"], entrypoint=spec["entrypoint"])
dep_id = f.deploy(
    name=spec["name"],
    work_pool_name=spec["pool"],
    parameters=spec["parameters"],
    job_variables=spec["job_variables"],
    build=False,
    push=False,
    print_next_steps=False,
    ignore_warnings=True,
)
print("DEPLOYMENT_ID=" + str(dep_id))
"""


def deploy_flow(
    server: PrefectServer,
    entrypoint: str,
    *,
    name: str,
    pool: str = LIVE_POOL,
    source: str | Path = REPO_ROOT,
    parameters: Mapping[str, Any] | None = None,
    job_variables: Mapping[str, Any] | None = None,
    timeout: float = 120.0,
) -> str:
    """Deploy `entrypoint` ("path/to/file.py:flow_fn", relative to `source`) from a local
    folder to `pool`, in a subprocess: `flow.from_source(source, entrypoint).deploy(...)`.
    The deployment's pull step is `set_working_directory: <source>`, so a process worker on
    this machine runs the code in place (no git, no network). Returns the deployment id."""
    spec = {
        "source": str(source),
        "entrypoint": entrypoint,
        "name": name,
        "pool": pool,
        "parameters": dict(parameters or {}),
        "job_variables": dict(job_variables or {}),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _DEPLOY_SCRIPT, json.dumps(spec)],
        env=server.env,
        cwd=str(source),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    found = re.search(r"DEPLOYMENT_ID=([0-9a-f-]{36})", proc.stdout)
    if proc.returncode != 0 or not found:
        raise RuntimeError(
            f"deploying {entrypoint} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return found.group(1)


def run_deployment_cli(
    server: PrefectServer, name: str, params: Mapping[str, Any] | None = None
) -> str:
    """`prefect deployment run <flow>/<deployment> --params <json>`; returns the flow run id
    parsed from its output (`└── UUID: <id>`)."""
    args = ["deployment", "run", name]
    if params:
        args += ["--params", json.dumps(params)]
    out = server.cli(*args)
    found = re.search(r"UUID:\s*([0-9a-f]{8}-[0-9a-f-]{27})", out)
    if not found:
        raise RuntimeError(f"no flow run id in the output of prefect {' '.join(args)}:\n{out}")
    return found.group(1)


def poll_until[T](
    read: Callable[[], T],
    done: Callable[[T], bool],
    timeout: float,
    poll: float,
    why: Callable[[T], str],
) -> T:
    """``read()`` every ``poll`` seconds until ``done`` holds for what it read, which is
    returned; after ``timeout`` seconds a TimeoutError saying ``why`` of the last read."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(why(value))
        time.sleep(poll)


def wait_for_flow_run(
    client: SyncPrefectClient,
    flow_run_id: str | uuid.UUID,
    timeout: float = 120.0,
    poll: float = 0.5,
) -> FlowRun:
    """Poll the API until the flow run reaches a final state; returns the run. Raises
    TimeoutError with the last state seen."""
    run_id = uuid.UUID(str(flow_run_id))
    return poll_until(
        lambda: client.read_flow_run(run_id),
        lambda run: run.state is not None and run.state.is_final(),
        timeout,
        poll,
        lambda run: f"flow run {run_id} not final after {timeout:.0f} s (state: {run.state!r})",
    )


def wait_for_flow_runs(
    client: SyncPrefectClient,
    deployment_id: str | uuid.UUID,
    count: int,
    timeout: float = 60.0,
    poll: float = 0.5,
) -> list[FlowRun]:
    """Poll until the deployment has at least `count` flow runs; returns them (newest first)."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.sorting import FlowRunSort

    flt = DeploymentFilter(id=DeploymentFilterId(any_=[uuid.UUID(str(deployment_id))]))
    return poll_until(
        lambda: client.read_flow_runs(deployment_filter=flt, sort=FlowRunSort.START_TIME_DESC),
        lambda runs: len(runs) >= count,
        timeout,
        poll,
        lambda runs: f"{len(runs)} of {count} flow runs after {timeout:.0f} s",
    )


def wait_for_task_runs(
    client: SyncPrefectClient,
    flow_run_id: str | uuid.UUID,
    count: int,
    timeout: float = 30.0,
    poll: float = 0.5,
) -> list[Any]:
    """Poll until the flow run has `count` task runs in a final state (their records reach
    the API asynchronously, after the flow run itself may already be final)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    flt = FlowRunFilter(id=FlowRunFilterId(any_=[uuid.UUID(str(flow_run_id))]))

    def final(runs: list[Any]) -> list[Any]:
        return [r for r in runs if r.state is not None and r.state.is_final()]

    runs = poll_until(
        lambda: client.read_task_runs(flow_run_filter=flt),
        lambda runs: len(final(runs)) >= count,
        timeout,
        poll,
        lambda runs: (
            f"task runs of {flow_run_id} after {timeout:.0f} s:"
            f" {[(r.name, r.state_name) for r in runs]}"
        ),
    )
    return final(runs)


# --- the Prefect UI (v1, served at the server's root) ------------------------------------


def ui_form_field(page: Any, label: str) -> Any:
    """The body (inputs) of the form field labelled `label` in the Prefect UI's forms.

    Both the run form's own fields ("Run Name") and the parameter fields generated from the
    flow's JSON schema are `div.p-label` blocks: a `label.p-label__label` header (parameter
    labels read "<title>" or "<title> (Optional)") and a `.p-label__body` holding the inputs.
    The labels' `for` points at no input, so `get_by_label` cannot be used. Nested models
    are nested blocks; this picks the innermost block whose label matches.
    """
    pattern = re.compile(rf"^\s*{re.escape(label)}(\s*\(Optional\))?\s*$", re.IGNORECASE)
    label_el = page.locator("label.p-label__label").filter(has_text=pattern)
    block = label_el.locator(
        "xpath=ancestor::div[contains(concat(' ', normalize-space(@class), ' '), ' p-label ')][1]"
    )
    return block.locator("xpath=./div[contains(@class, 'p-label__body')]")


@dataclass(frozen=True)
class UiSubmission:
    """The flow run a UI form created, as the server answered its POST."""

    flow_run_id: str
    name: str
    parameters: dict[str, Any]
    problems: list[str]


def ui_custom_run(
    page: Any,
    server: PrefectServer,
    deployment_id: str,
    *,
    run_name: str,
    text: Mapping[str, str] | None = None,
    numbers: Mapping[str, int | float] | None = None,
    screenshot: Path | None = None,
    timeout_ms: float = 30_000,
    submit_attempts: int = 4,
) -> UiSubmission:
    """On the deployment's page: "Run" -> "Custom run", set the run name and the given
    parameter fields (text boxes by label, number boxes by label), "Submit", and wait for the
    UI's confirmation ("<run_name> scheduled to start ...") and its return to the
    deployment's page. Saves a screenshot of the filled form to `screenshot` if given.
    Returns the flow run the UI's `create_flow_run` request answered with (its id, so callers
    never look the run up by name) and the failed requests (status >= 400) and console errors
    seen on the way (a UI page tolerates some); failures raise AssertionError with those and
    the server log.

    Selectors (Prefect 3.9's v1 UI): button "Run" (exact) -> button/link "Custom run" ->
    `ui_form_field` blocks by label ("Run Name", parameter titles) -> textbox / spinbutton
    roles inside -> button "Submit" -> toast text "<name> scheduled".
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.set_default_timeout(timeout_ms)
    problems: list[str] = []  # failed API calls and console errors, for the failure message

    def on_response(r: Any) -> None:
        if r.status >= 400:
            problems.append(f"{r.status} {r.request.method} {r.url}")

    def on_console(m: Any) -> None:
        if m.type == "error":
            problems.append(f"console: {m.text}")

    page.on("response", on_response)
    page.on("console", on_console)
    try:
        page.goto(server.ui(f"/deployments/deployment/{deployment_id}"), wait_until="networkidle")
        page.get_by_role("button", name="Run", exact=True).click()
        page.get_by_role("button", name="Custom run").or_(
            page.get_by_role("link", name="Custom run")
        ).first.click()
        submit = page.get_by_role("button", name="Submit")
        submit.wait_for()
        fields = [(ui_form_field(page, "Run Name").get_by_role("textbox"), run_name)]
        fields += [
            (ui_form_field(page, label).get_by_role("textbox").first, value)
            for label, value in (text or {}).items()
        ]
        fields += [
            (ui_form_field(page, label).get_by_role("spinbutton").first, str(number))
            for label, number in (numbers or {}).items()
        ]
        # the form may still be filling in its defaults (e.g. a generated run name) on a
        # loaded machine: fill until every value sticks
        for _ in range(20):
            for box, value in fields:
                if box.input_value() != value:
                    box.fill(value)
            page.wait_for_timeout(250)
            if all(box.input_value() == value for box, value in fields):
                break
        if screenshot is not None:
            page.screenshot(path=str(screenshot), full_page=True)
        for attempt in range(1, submit_attempts + 1):
            with page.expect_response(
                lambda r: r.request.method == "POST" and "/create_flow_run" in r.url
            ) as created:
                if attempt == 1:
                    submit.click()
                else:  # the last failure's "Oops" toast may lie over the button: a click
                    # event on the button itself submits the form all the same
                    submit.dispatch_event("click")
            response = created.value
            if response.ok:
                break
            # SQLite under concurrent writers answers "database is locked" as a 503; Prefect's
            # Python client retries those, the UI shows "Oops. Something went wrong." and keeps
            # the form, so a user (and this helper) submits again.
            if response.status != 503 or attempt == submit_attempts:
                raise AssertionError(
                    f"the UI's create_flow_run got {response.status}: {response.text()}\n"
                    f"failed requests/console errors: {problems}\n"
                    f"server log:\n{_tail(server.log_path)}"
                )
            page.wait_for_timeout(1000 * attempt)
        page.get_by_text(re.compile(rf"{re.escape(run_name)}\s+scheduled")).first.wait_for()
        # The UI then goes back to the deployment's page (its runs list shows the new run).
        page.wait_for_url(re.compile(rf"/deployments/deployment/{deployment_id}(\?.*)?$"))
        submit.wait_for(state="detached")  # the form's fade-out transition has ended
        page.get_by_role("button", name="Run", exact=True).wait_for()
        with contextlib.suppress(PlaywrightTimeout):  # only for a telling screenshot
            page.get_by_role("link", name=run_name).first.wait_for(timeout=10_000)
            page.wait_for_load_state("networkidle", timeout=5_000)
        page.wait_for_timeout(1000)  # the page's fade-in, for the same reason
        body = response.json()
        return UiSubmission(str(body["id"]), str(body["name"]), dict(body["parameters"]), problems)
    except PlaywrightTimeout as exc:
        raise AssertionError(
            f"{exc}\nfailed requests/console errors: {problems}\n"
            f"server log:\n{_tail(server.log_path)}"
        ) from exc


@contextlib.contextmanager
def open_browser(headless: bool = True) -> Iterator[Any]:
    """Debian's Chromium driven by PyPI's playwright (sync API); yields a `Browser`; the test
    is skipped where the browser is missing."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} missing (scripts/bootstrap.sh installs Debian's chromium)")
    with chromium(headless=headless) as browser:
        yield browser


# --- pytest fixtures --------------------------------------------------------------------


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    with PrefectServer(tmp_path_factory.mktemp("prefect-home")) as server:
        yield server


@pytest.fixture(scope="session")
def prefect_worker(prefect_server: PrefectServer) -> Iterator[PrefectWorker]:
    with PrefectWorker(prefect_server, pool=LIVE_POOL) as worker:
        yield worker


@pytest.fixture
def prefect_client(prefect_server: PrefectServer) -> Iterator[SyncPrefectClient]:
    with prefect_server.client() as client:
        yield client


@pytest.fixture
def browser() -> Iterator[Any]:
    with open_browser() as b:
        yield b
