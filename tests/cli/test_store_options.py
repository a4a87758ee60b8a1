"""The commands reach a campaign's store with its storage options (an S3 endpoint of its own,
here moto's): ``spade status`` / ``stop`` / ``resume`` take ``--storage-options``, and the
summary a finished run prints reads the configured store, not the root alone."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from spade.config import CampaignConfig, load_config
from spade.pipeline.campaign import LEASE_FILE, start_campaign
from spade.pipeline.record import campaign_store
from spade.storage.lease import Lease
from tests.cli.test_run_cli import spade


def _s3_campaign(s3_bucket, campaign_id: str) -> CampaignConfig:
    cfg = load_config(
        overrides={
            "storage.root": f"s3://{s3_bucket.name}/runs",
            "storage.storage_options": s3_bucket.storage_options,
        }
    )
    start_campaign(campaign_store(cfg, campaign_id), cfg)
    return cfg


def test_status_and_stop_reach_a_store_on_its_own_endpoint(tmp_path, s3_bucket):
    cfg = _s3_campaign(s3_bucket, "far")
    where = [
        "--store",
        cfg.storage.root,
        "--storage-options",
        json.dumps(s3_bucket.storage_options),
    ]
    done = spade("status", "far", *where, "--json", home=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["rounds"] == []
    stopped = spade("stop", "far", *where, home=tmp_path)
    assert stopped.returncode == 0 and "stop requested" in stopped.stdout, stopped.stderr
    bad = spade(
        "status", "far", "--store", cfg.storage.root, "--storage-options", "[1]", home=tmp_path
    )
    assert bad.returncode == 2 and "error: --storage-options must be a JSON object" in bad.stderr


@pytest.mark.attack
def test_resume_reads_the_saved_config_through_the_given_endpoint(tmp_path, s3_bucket):
    """The campaign is held by this process: resume gets as far as naming the holder, so it read
    the saved config from the S3 store and checked the lease there."""
    cfg = _s3_campaign(s3_bucket, "busy")
    from spade.storage import CampaignStore, ObjectStore

    cs = CampaignStore(ObjectStore.from_config(cfg.storage), "busy")
    options = json.dumps(s3_bucket.storage_options)
    with Lease(cs.store, f"campaign/busy/{LEASE_FILE}", 600) as held:
        done = spade(
            "resume", "busy", "--store", cfg.storage.root, "--storage-options", options,
            "--no-live", home=tmp_path,
        )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: campaign 'busy' is held by" in done.stderr and held.owner in done.stderr
    assert f"pid {os.getpid()}" in done.stderr and "Traceback" not in done.stderr


def test_a_finished_run_shows_the_status_of_the_configured_store(s3_bucket, capsys):
    from flows.cli import _finish

    cfg = _s3_campaign(s3_bucket, "done")
    state = SimpleNamespace(name="Completed", is_completed=lambda: True)
    _finish(cfg, "done", state)
    out = capsys.readouterr().out
    assert "campaign done" in out and "campaign done: Completed" in out
    assert f"spade resume done --store {cfg.storage.root}" in out
