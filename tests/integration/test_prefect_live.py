"""A deployment on a REAL Prefect server on loopback, run by a real process worker: started
through the CLI and through the Prefect UI in headless Chromium (custom run, changed
parameters). The flow is tests/integration/live_flows/hello.py; the fixtures and helpers are
in tests/integration/prefect_live.py."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.integration.prefect_live import (
    PrefectServer,
    PrefectWorker,
    deploy_flow,
    run_deployment_cli,
    ui_custom_run,
    wait_for_flow_run,
    wait_for_task_runs,
)

ENTRYPOINT = "tests/integration/live_flows/hello.py:hello"
FLOW_NAME = "live-hello"
DEPLOYMENT = "live-test"


@pytest.fixture(scope="module")
def hello_deployment(
    prefect_server: PrefectServer,
    prefect_worker: PrefectWorker,
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    """The hello flow deployed from this checkout to the worker's process pool; its default
    `out_path` is a file no test expects, so a run that ignored a changed parameter fails."""
    default_out = tmp_path_factory.mktemp("hello-default") / "default.json"
    return deploy_flow(
        prefect_server,
        ENTRYPOINT,
        name=DEPLOYMENT,
        pool=prefect_worker.pool,
        parameters={"out_path": str(default_out)},
    )


def _check_completed(client, worker: PrefectWorker, run_id, out: Path, greeting: dict) -> None:
    run = wait_for_flow_run(client, run_id, timeout=90)
    assert run.state is not None and run.state.is_completed(), (
        f"{run.state!r}\nworker log:\n{worker.log()}"
    )
    assert run.parameters["out_path"] == str(out)
    assert run.parameters["greeting"] == greeting
    written = json.loads(out.read_text())
    assert written["greeting"] == greeting
    assert written["text"] == " ".join([f"hello {greeting['name']}"] * greeting["times"])
    (task_run,) = wait_for_task_runs(client, run_id, count=1)
    assert task_run.state.is_completed()


@pytest.mark.slow  # a run with changed parameters on this server and worker: the UI's, below
def test_cli_run_with_changed_parameters(
    prefect_server, prefect_worker, prefect_client, hello_deployment, tmp_path
):
    deployment = prefect_client.read_deployment(uuid.UUID(hello_deployment))
    assert deployment.work_pool_name == prefect_worker.pool
    assert deployment.entrypoint == ENTRYPOINT

    out = tmp_path / "cli.json"
    greeting = {"name": "cli", "times": 2}
    run_id = run_deployment_cli(
        prefect_server, f"{FLOW_NAME}/{DEPLOYMENT}", {"out_path": str(out), "greeting": greeting}
    )
    _check_completed(prefect_client, prefect_worker, run_id, out, greeting)


def test_ui_custom_run_with_changed_parameters(
    prefect_server, prefect_worker, prefect_client, hello_deployment, browser, tmp_path
):
    out = tmp_path / "ui.json"
    run_name = f"ui-custom-{uuid.uuid4().hex[:8]}"
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    form_shot = tmp_path / "custom-run-form.png"
    done_shot = tmp_path / "after-submit.png"
    try:
        submitted = ui_custom_run(
            page,
            prefect_server,
            hello_deployment,
            run_name=run_name,
            text={"out_path": str(out), "Name": "ui-form"},
            numbers={"Times": 3},
            screenshot=form_shot,
        )
        print(f"UI request failures/console errors (tolerated): {submitted.problems}")
    finally:
        page.screenshot(path=str(done_shot))
        print(f"screenshots: {form_shot} {done_shot}")
    assert submitted.name == run_name
    run = prefect_client.read_flow_run(uuid.UUID(submitted.flow_run_id))
    assert str(run.deployment_id) == hello_deployment
    deployment = prefect_client.read_deployment(uuid.UUID(hello_deployment))
    assert deployment.work_pool_name == prefect_worker.pool
    assert deployment.entrypoint == ENTRYPOINT
    _check_completed(prefect_client, prefect_worker, run.id, out, {"name": "ui-form", "times": 3})
