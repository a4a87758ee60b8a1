"""dashboards/app.py: rendered by Streamlit's AppTest, and served for real to headless Chromium.

The campaign is synthetic (tests/dashboard/synthetic.py); the checks compare what the page
shows with the numbers written: chart data is decoded from the Vega-Lite elements.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from spade.cli import app as cli_app
from tests.dashboard.serve import served_dashboard
from tests.dashboard.synthetic import build_campaign
from tests.integration.prefect_live import (
    REPO_ROOT,
    open_browser,
)

ROUNDS, ENVS = 5, 20
dashboard_cli = importlib.import_module("spade.cli.dashboard")  # spade.cli.dashboard: the command
APP = str(REPO_ROOT / "dashboards" / "app.py")


@pytest.fixture(scope="module")
def camp(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return build_campaign(root, "demo", rounds=ROUNDS, environments=ENVS, in_progress=True)


def run_app(monkeypatch, root: str, campaign: str | None) -> AppTest:
    monkeypatch.setenv("SPADE_DASHBOARD_STORE", root)
    if campaign:
        monkeypatch.setenv("SPADE_DASHBOARD_CAMPAIGN", campaign)
    else:
        monkeypatch.delenv("SPADE_DASHBOARD_CAMPAIGN", raising=False)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    return at


def charts(at: AppTest) -> list[dict[str, dict[Any, float]]]:
    """Every Vega-Lite chart as {series: {x: value}}: Streamlit sends (x, color, value) columns,
    or (x, series) for a single series."""
    out = []
    for el in at.get("vega_lite_chart"):
        df = pa.ipc.open_stream(el.proto.datasets[0].data.data).read_pandas()
        found: dict[str, dict[Any, float]] = {}
        if len(df.columns) == 2:
            found[df.columns[1]] = dict(zip(df.iloc[:, 0], df.iloc[:, 1], strict=True))
        else:
            for x, series, value in df.iloc[:, :3].itertuples(index=False):
                found.setdefault(series, {})[x] = value
        out.append(found)
    return out


def chart_with(all_charts, *series):
    return next(c for c in all_charts if set(series) <= set(c))


def by_label(widgets, label):
    return next(w for w in widgets if w.label == label)


def test_rounds_tab_shows_the_campaign_numbers(camp, monkeypatch):
    at = run_app(monkeypatch, camp.root, "demo")
    last = camp.expected[ROUNDS - 1]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Win rate (hinted)"] == f"{last['hinted_win_rate']:.3f}"
    assert metrics["Win rate (unhinted)"] == f"{last['win_rate']:.3f}"
    assert metrics["Regret"] == f"{last['regret']:.3f}"
    assert metrics["Acceptance"] == f"{last['acceptance_rate']:.3f}"
    assert metrics["Memory"] == str(last["memory_size"])
    assert f"{ROUNDS + 1} rounds · last complete round: {ROUNDS - 1}" in at.caption[0].value
    got = charts(at)
    wins = chart_with(got, "hinted", "unhinted", "held-out")
    regret = chart_with(got, "regret", "designer_reward")
    memory = chart_with(got, "memory_size")
    loss = chart_with(got, "agent_loss", "designer_loss")
    stages = chart_with(got, "evaluate", "train_agent")
    for rnd, want in camp.expected.items():
        assert wins["hinted"][rnd] == pytest.approx(want["hinted_win_rate"])
        assert wins["unhinted"][rnd] == pytest.approx(want["win_rate"])
        assert wins["held-out"][rnd] == pytest.approx(want["heldout_win_rate"])
        assert regret["regret"][rnd] == pytest.approx(want["regret"])
        assert memory["memory_size"][rnd] == want["memory_size"]
        assert loss["agent_loss"][rnd] == want["train"]["agent"]["loss"]
        assert stages["evaluate"][rnd] == want["stage_seconds"]["evaluate"]
        for kind, n in want["rejections"].items():
            assert chart_with(got, kind)[kind][rnd] == n
        for skill, n in want["skills"].items():
            assert chart_with(got, skill)[skill][rnd] == n
    checks = chart_with(got, "designs")["designs"]  # rejections by check, latest round
    assert checks == camp.expected[ROUNDS - 1]["rejected_checks"]
    table = at.dataframe[0].value
    assert table.loc[2, "accepted"] == camp.expected[2]["accepted"]


def test_gallery_shows_one_environment(camp, monkeypatch):
    at = run_app(monkeypatch, camp.root, "demo")
    env = next(e for e in camp.envs.values() if e["accepted"])
    by_label(at.selectbox, "Environment").set_value(env["env_id"]).run()
    assert not at.exception
    assert at.code[0].value == env["code"].rstrip()
    markdown = "\n".join(m.value for m in at.markdown)
    assert f"Lanterns (article {ROUNDS - 1}." in markdown and env["doc_id"] in markdown
    assert env["hint"] in [i.value for i in at.info]
    checks = at.dataframe[1].value
    assert list(checks["check"]) == [c["name"] for c in env["verdict"]["checks"]]
    assert len(at.chat_message) == 8  # one hinted and one unhinted play, 4 messages each
    history = chart_with(charts(at), "regret", "win_rate")
    assert set(history["regret"]) <= set(range(ROUNDS))
    by_label(at.radio, "Designs").set_value("rejected").run()
    assert any("Rejected: infeasible" in e.value for e in at.error)
    assert at.code[0].value.startswith('"""Lantern Maze r4s0a0')


def test_memory_tab_and_empty_store(camp, monkeypatch, tmp_path):
    at = run_app(monkeypatch, camp.root, "demo")
    memory = at.dataframe[-1].value
    assert len(memory) == camp.expected[ROUNDS - 1]["memory_size"]
    assert list(memory["round"])[-1] == ROUNDS - 1
    at = run_app(monkeypatch, str(tmp_path / "empty"), None)
    assert "No campaigns" in at.error[0].value


def test_app_on_an_s3_store(s3_bucket, monkeypatch):
    root = f"s3://{s3_bucket.name}/runs"
    options = s3_bucket.storage_options
    camp = build_campaign(root, "on-s3", rounds=2, environments=4, storage_options=options)
    monkeypatch.setenv("SPADE_DASHBOARD_STORAGE_OPTIONS", json.dumps(options))
    at = run_app(monkeypatch, root, "on-s3")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Win rate (hinted)"] == f"{camp.expected[1]['hinted_win_rate']:.3f}"
    env = next(e for e in camp.envs.values() if e["accepted"])
    by_label(at.selectbox, "Environment").set_value(env["env_id"]).run()
    assert at.code[0].value == env["code"].rstrip() and len(at.chat_message) == 8


def test_cli_builds_the_streamlit_command(camp, monkeypatch):
    started: list[list[str]] = []

    class FakeProc:
        def __init__(self, cmd):
            started.append(cmd)

        def wait(self, timeout=None):
            return 0

        def terminate(self):
            pass

    monkeypatch.setattr(dashboard_cli.subprocess, "Popen", FakeProc)
    monkeypatch.setattr(dashboard_cli.signal, "signal", lambda *a: None)
    opts = json.dumps({"anon": False})
    args = ["dashboard", "demo", "--store", camp.root, "--port", "8123", "--storage-options", opts]
    result = CliRunner().invoke(cli_app, args)
    assert result.exit_code == 0, result.output
    assert "http://localhost:8123" in result.output
    (cmd,) = started
    assert cmd[1:5] == ["-m", "streamlit", "run", APP]
    assert cmd[cmd.index("--server.headless") + 1] == "true"
    assert cmd[cmd.index("--") + 1 :] == ["--store", camp.root, "--campaign", "demo", "--storage-options", opts]  # fmt: skip
    result = CliRunner().invoke(cli_app, ["dashboard", "nope", "--store", camp.root])
    assert result.exit_code == 2 and "known: demo" in result.output


def test_browser_loads_the_served_dashboard(camp, tmp_path):
    last = camp.expected[ROUNDS - 1]
    log = tmp_path / "dashboard.log"
    with served_dashboard(camp.root, "demo", log) as url, open_browser() as browser:
        page = browser.new_page(viewport={"width": 1600, "height": 3000})
        page.goto(url)
        page.get_by_text("Campaign demo").wait_for(timeout=30_000)
        metric = page.locator('[data-testid="stMetric"]').filter(has_text="Win rate (hinted)")
        value = f"{last['hinted_win_rate']:.3f}"
        metric.get_by_text(value, exact=True).wait_for(timeout=20_000)
        charts = page.locator('[data-testid="stVegaLiteChart"]')
        charts.nth(9).wait_for(timeout=20_000)  # the rounds tab's ten charts are drawn
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        page.get_by_role("tab", name="Environments").click()
        page.get_by_text("Lantern Maze r4").first.wait_for(timeout=20_000)
        page.screenshot(path=str(tmp_path / "gallery.png"), full_page=True)
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    print(f"screenshots: {tmp_path / 'dashboard.png'} {tmp_path / 'gallery.png'}")
