"""SPADE's own deployments on a REAL Prefect server: registered from infra/prefect.yaml by
`spade deploy`, run by a real process worker (started with `prefect deployment run` and from
the UI's custom-run form in headless Chromium), writing every artifact and every task result to
a real S3 endpoint (moto) — against the scripted OpenAI stand-in and a tiny policy."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from spade.config import load_config
from spade.pipeline.campaign import round_complete
from spade.pipeline.record import campaign_store
from spade.storage import STAGES, ObjectStore
from spade.testing.scripted_designer import (
    round_overrides,
    tiny_policy_overrides,
    write_corpus,
    write_tiny_policy,
)
from tests.integration.prefect_live import (
    REPO_ROOT,
    PrefectServer,
    PrefectWorker,
    ui_custom_run,
    wait_for_flow_run,
)

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def live_campaign(moto_endpoint, tmp_path_factory) -> dict[str, Any]:
    """The scripted stand-in, a tiny policy and an S3 bucket; the config every run uses."""
    import boto3

    from spade.testing.openai_server import FakeOpenAIServer
    from spade.testing.scripted_designer import ScriptedModel

    root = tmp_path_factory.mktemp("deploy")
    bucket = f"spade-deploy-{uuid.uuid4().hex[:8]}"
    boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket=bucket)
    options = {"endpoint_url": moto_endpoint, "key": "testing", "secret": "testing"}
    with FakeOpenAIServer(script=ScriptedModel()) as server:
        overrides = round_overrides(server, write_corpus(root / "corpus.jsonl"))
        overrides |= {
            "name": "deployed",
            **tiny_policy_overrides(write_tiny_policy(root / "policy")),
            "storage.root": f"s3://{bucket}/spade",
            "storage.storage_options": options,
            "run.gpu_concurrency_limit": "spade-gpu",
        }
        cfg = load_config(overrides=overrides)
        yield {"config": cfg, "root": root}


@pytest.fixture(scope="module")
def deployed(prefect_server: PrefectServer, live_campaign, tmp_path_factory) -> dict[str, str]:
    """`spade deploy` of infra/prefect.yaml with the test campaign's config as the default."""
    spec = yaml.safe_load((REPO_ROOT / "infra" / "prefect.yaml").read_text())
    config = live_campaign["config"].model_dump(mode="json")
    for deployment in spec["deployments"]:
        deployment["parameters"]["config"] = config
    spec.pop("definitions")
    prefect_file = tmp_path_factory.mktemp("prefect-file") / "prefect.yaml"
    prefect_file.write_text(yaml.safe_dump(spec))
    spade = Path(sys.executable).with_name("spade")
    done = subprocess.run(
        [str(spade), "deploy", "--prefect-file", str(prefect_file), "--gpu-slots", "1"],
        env=prefect_server.env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with prefect_server.client() as client:
        return {
            name: str(client.read_deployment_by_name(name).id)
            for name in ("spade-campaign/campaign", "spade-round/round", "spade-heldout/heldout")
        }


@pytest.fixture(scope="module")
def gpu_worker(prefect_server: PrefectServer, deployed) -> Any:
    with PrefectWorker(prefect_server, pool="spade-gpu") as worker:
        yield worker


def _check_round_in_s3(cfg, campaign_id: str) -> None:
    cs = campaign_store(cfg, campaign_id)
    assert cs.store.url().startswith("s3://")
    assert round_complete(cs, 0), cs.completed_stages(0)
    assert cs.completed_stages(0) == list(STAGES)
    results = ObjectStore(f"{cfg.storage.root}/prefect-results", cfg.storage.storage_options)
    assert results.list(""), "task results were not persisted to S3"


@pytest.mark.slow  # `spade deploy` on an embedded server: tests/flows/test_deploy_schedule.py
def test_spade_deploy_registers_typed_deployments_with_an_inactive_schedule(
    prefect_server, deployed
):
    with prefect_server.client() as client:
        campaign = client.read_deployment(uuid.UUID(deployed["spade-campaign/campaign"]))
        assert campaign.work_pool_name == "spade-cpu"
        assert not campaign.schedules  # the nightly example is its own deployment
        nightly = client.read_deployment_by_name("spade-campaign/nightly")
        assert nightly.parameters["campaign_id"] == "nightly"  # continues one campaign
        assert nightly.schedules and not any(s.active for s in nightly.schedules)
        schema = campaign.parameter_openapi_schema
        assert "config" in schema["properties"]
        assert "CampaignConfig" in str(schema)
        limit = client.read_global_concurrency_limit_by_name("spade-gpu")
        assert limit.limit == 1


@pytest.mark.slow  # a round deployment run by a real worker, from the UI, writing to S3
def test_a_round_started_from_the_ui_with_a_changed_parameter_completes(
    prefect_server, prefect_client, deployed, gpu_worker, live_campaign, browser, tmp_path
):
    cfg = live_campaign["config"]
    page = browser.new_page()
    run_name = f"ui-round-{uuid.uuid4().hex[:6]}"
    submitted = ui_custom_run(
        page,
        prefect_server,
        deployed["spade-round/round"],
        run_name=run_name,
        text={"campaign_id": "from-the-ui"},
        screenshot=tmp_path / "custom-run.png",
    )
    # the run the UI's POST created, by id: never looked up by name (a loaded machine's form
    # could still be filling in its generated name when the test typed its own)
    assert submitted.parameters.get("campaign_id") == "from-the-ui", submitted
    run = wait_for_flow_run(prefect_client, submitted.flow_run_id, timeout=600)
    page.screenshot(path=str(tmp_path / "after.png"), full_page=True)
    print("screenshots:", tmp_path)
    assert run.state is not None and run.state.is_completed(), gpu_worker.log()
    assert run.parameters["campaign_id"] == "from-the-ui"
    _check_round_in_s3(cfg, "from-the-ui")


def test_deploy_without_a_server_says_so():
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    spade = Path(sys.executable).with_name("spade")
    done = subprocess.run([str(spade), "deploy"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "PREFECT_API_URL" in done.stderr
