"""``spade deploy --schedule CRON --campaign-id ID`` against a real Prefect server: a scheduled
``spade-campaign`` deployment whose every tick continues that campaign (``more_rounds``), with
an active schedule and a concurrency limit of 1; infra/prefect.yaml's nightly example
continues a named campaign too. ``spade deploy --config PRESET`` adds the preset's own
deployment on the pool its placement needs (an 8-GPU preset: spade-gpu, its flow runs asking
for 8 GPUs), as a schedule of it does. Bad input is one clear error before anything is
registered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows.cli import PREFECT_FILE, REPO_ROOT

SPADE = str(Path(sys.executable).with_name("spade"))
GAMES_8GPU = REPO_ROOT / "configs" / "games-8gpu.yaml"


def _spade(*args: str, api_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return subprocess.run(
        [SPADE, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_deploy_with_a_schedule_continues_the_named_campaign(prefect_api, tmp_path):
    from prefect import get_client

    config = tmp_path / "weeks.yaml"
    config.write_text(yaml.safe_dump({"name": "weeks", "designer": {"envs_per_round": 2}}))
    done = _spade(
        "deploy",
        *("--schedule", "30 3 * * 1", "--campaign-id", "weeks-1"),
        *("--rounds-per-tick", "2", "--config", str(config), "--work-pool", "spade-gpu"),
        api_url=prefect_api,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "spade-campaign/campaign-weeks-1" in done.stdout
    with get_client(sync_client=True) as client:
        tick = client.read_deployment_by_name("spade-campaign/campaign-weeks-1")
        nightly = client.read_deployment_by_name("spade-campaign/nightly")
        plain = client.read_deployment_by_name("spade-campaign/campaign")
    (schedule,) = tick.schedules
    assert schedule.active and schedule.schedule.cron == "30 3 * * 1"  # type: ignore[union-attr]
    assert schedule.schedule.timezone == "UTC"  # type: ignore[union-attr]
    assert tick.parameters["campaign_id"] == "weeks-1"
    assert tick.parameters["more_rounds"] == 2
    assert tick.parameters["config"]["name"] == "weeks"
    assert tick.parameters["config"]["designer"]["envs_per_round"] == 2
    assert tick.work_pool_name == "spade-gpu" and nightly.work_pool_name == "spade-cpu"
    assert tick.global_concurrency_limit is not None
    assert tick.global_concurrency_limit.limit == 1
    assert tick.concurrency_options is not None
    assert str(tick.concurrency_options.collision_strategy.value) == "ENQUEUE"
    # the file's own nightly example continues the campaign "nightly" (off until turned on)
    assert nightly.parameters["campaign_id"] == "nightly"
    assert nightly.parameters["more_rounds"] == 1
    assert nightly.schedules and not any(s.active for s in nightly.schedules)
    assert nightly.global_concurrency_limit and nightly.global_concurrency_limit.limit == 1
    assert not plain.schedules  # the plain campaign deployment runs when asked


def test_deploy_with_a_gpu_preset_registers_it_on_the_gpu_pool_asking_for_its_gpus(prefect_api):
    from prefect import get_client

    done = _spade("deploy", "--config", str(GAMES_8GPU), "--gpu-slots", "2", api_url=prefect_api)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "deployment spade-campaign/games-8gpu" in done.stdout
    assert "work pool spade-gpu, 8 GPU(s) per flow run" in done.stdout
    with get_client(sync_client=True) as client:
        preset = client.read_deployment_by_name("spade-campaign/games-8gpu")
        plain = client.read_deployment_by_name("spade-campaign/campaign")
        limit = client.read_global_concurrency_limit_by_name("spade-gpu")
    assert preset.work_pool_name == "spade-gpu" and plain.work_pool_name == "spade-cpu"
    assert preset.job_variables == {"gpus": 8}
    assert preset.parameters["config"]["name"] == "games-8gpu"
    assert preset.parameters["config"]["training"]["ranks"] == 4
    assert "config" in preset.parameter_openapi_schema["properties"]  # the UI's typed form
    assert limit.limit == 2  # --gpu-slots, set through Prefect's client

    tick = _spade(
        "deploy", *("--schedule", "0 4 * * *", "--campaign-id", "games-lab"),
        *("--config", str(GAMES_8GPU)), api_url=prefect_api,
    )  # fmt: skip
    assert tick.returncode == 0, tick.stdout + tick.stderr
    with get_client(sync_client=True) as client:
        scheduled = client.read_deployment_by_name("spade-campaign/campaign-games-lab")
    # no --work-pool: the pool the preset's placement needs, not the campaign deployment's
    assert scheduled.work_pool_name == "spade-gpu" and scheduled.job_variables == {"gpus": 8}


def test_deploy_refuses_a_config_named_as_a_deployment_of_the_file(tmp_path):
    config = tmp_path / "campaign.yaml"
    config.write_text(yaml.safe_dump({"name": "nightly"}))
    # no server at this address: the error comes before any call to it
    done = _spade("deploy", "--config", str(config), api_url="http://127.0.0.1:9/api")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "'nightly' is a deployment of" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--schedule", "0 2 * * *"), "--schedule and --campaign-id go together"),
        (("--campaign-id", "x"), "--schedule and --campaign-id go together"),
        (("--schedule", "every night", "--campaign-id", "x"), "cron"),
        (("--schedule", "0 2 * * *", "--campaign-id", "no/slashes"), "no/slashes"),
    ],
)
def test_deploy_refuses_a_bad_schedule_before_registering_anything(args, expected, tmp_path):
    # no server at this address: the error comes before any call to it
    done = _spade("deploy", *args, api_url="http://127.0.0.1:9/api")
    assert done.returncode == 2, done.stdout + done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr


def test_the_nightly_example_continues_a_named_campaign():
    spec = yaml.safe_load(PREFECT_FILE.read_text())
    (nightly,) = [d for d in spec["deployments"] if d["name"] == "nightly"]
    assert nightly["entrypoint"] == "flows/campaign.py:campaign_flow"
    assert nightly["parameters"]["campaign_id"] == "nightly"
    assert nightly["parameters"]["more_rounds"] == 1
    assert nightly["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}


def test_the_tick_deployment_replaces_one_of_its_name_and_needs_a_campaign_template(tmp_path):
    from flows.schedule import with_tick_deployment

    once = with_tick_deployment(PREFECT_FILE, tmp_path / "once.yaml", "c1", "0 1 * * *", 1)
    twice = with_tick_deployment(once, tmp_path / "twice.yaml", "c1", "0 5 * * *", 3)
    ticks = [
        d for d in yaml.safe_load(twice.read_text())["deployments"] if d["name"] == "campaign-c1"
    ]
    assert [(t["schedules"][0]["cron"], t["parameters"]["more_rounds"]) for t in ticks] == [
        ("0 5 * * *", 3)
    ]
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump({"deployments": [{"name": "x", "entrypoint": "a.py:f"}]}))
    with pytest.raises(ValueError, match=r"no deployment of flows/campaign\.py:campaign_flow"):
        with_tick_deployment(bare, tmp_path / "out.yaml", "c1", "0 1 * * *", 1)
