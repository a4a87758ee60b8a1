"""The dashboard on a campaign the real pipeline produced (the round flow against the scripted
stand-in, whose regrets are known exactly), on a local store and on S3 (moto): the numbers on
the page are the campaign's, and headless Chromium renders the served app."""

from __future__ import annotations

import asyncio
from statistics import fmean

import pytest
from streamlit.testing.v1 import AppTest

from flows.campaign import campaign_flow
from spade.config import load_config
from spade.testing.scripted_designer import EXPECTED, tiny_policy_overrides, write_tiny_policy
from tests.dashboard.serve import served_dashboard
from tests.integration.prefect_live import REPO_ROOT, open_browser

pytestmark = pytest.mark.sandbox
APP = str(REPO_ROOT / "dashboards" / "app.py")


def _campaign(overrides, tmp_path, root: str, options=None) -> None:
    cfg = load_config(
        overrides={
            **overrides,
            "name": "real",
            "storage.root": root,
            "storage.storage_options": options or {},
            **tiny_policy_overrides(write_tiny_policy(tmp_path / "policy")),
        }
    )
    asyncio.run(campaign_flow(config=cfg, campaign_id="real", rounds=1))


def _check_page(monkeypatch, root: str, options: str | None = None) -> None:
    monkeypatch.setenv("SPADE_DASHBOARD_STORE", root)
    monkeypatch.setenv("SPADE_DASHBOARD_CAMPAIGN", "real")
    if options:
        monkeypatch.setenv("SPADE_DASHBOARD_STORAGE_OPTIONS", options)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    want = {k: fmean(e[k] for e in EXPECTED.values()) for k in ("regret", "win_rate")}
    assert metrics["Regret"] == f"{want['regret']:.3f}"
    assert metrics["Win rate (unhinted)"] == f"{want['win_rate']:.3f}"
    assert metrics["Win rate (hinted)"] == "1.000"
    assert metrics["Acceptance"] == f"{3 / 5:.3f}"


def test_dashboard_shows_a_real_campaigns_numbers(
    prefect_api, scripted_overrides, tmp_path, monkeypatch
):
    root = str(tmp_path / "store")
    _campaign(scripted_overrides, tmp_path, root)
    _check_page(monkeypatch, root)
    with served_dashboard(root, "real", tmp_path / "dashboard.log") as url, open_browser() as b:
        page = b.new_page(viewport={"width": 1600, "height": 3000})
        page.goto(url)
        metric = page.locator('[data-testid="stMetric"]').filter(has_text="Regret")
        metric.get_by_text("0.500", exact=True).wait_for(timeout=30_000)
        page.locator('[data-testid="stVegaLiteChart"]').nth(3).wait_for(timeout=20_000)
        page.screenshot(path=str(tmp_path / "real-dashboard.png"), full_page=True)
        page.get_by_role("tab", name="Environments").click()
        page.get_by_text("class ", exact=False).first.wait_for(timeout=20_000)
        page.screenshot(path=str(tmp_path / "real-gallery.png"), full_page=True)
    print(f"screenshots: {tmp_path / 'real-dashboard.png'} {tmp_path / 'real-gallery.png'}")


@pytest.mark.slow  # the app on an S3 store: tests/dashboard/test_app.py
def test_dashboard_reads_an_s3_campaign(
    prefect_api, scripted_overrides, s3_bucket, tmp_path, monkeypatch
):
    import json

    root = f"s3://{s3_bucket.name}/runs"
    _campaign(scripted_overrides, tmp_path, root, s3_bucket.storage_options)
    _check_page(monkeypatch, root, json.dumps(s3_bucket.storage_options))
