"""dashboards/app.py: rendered by Streamlit's AppTest, and served for real to headless Chromium.

The campaign is synthetic (spade/testing/synthetic.py); the checks compare what the page
shows with the numbers written: chart data is decoded from the Vega-Lite elements. Only the
open tab runs, so each test opens its tab first (``open_tab``).
"""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spade.cli import app as cli_app
from spade.testing.synthetic import SUITES, build_campaign
from tests.dashboard.apptest import APP, by_label, chart_with, charts, open_tab, run_app
from tests.dashboard.serve import served_dashboard
from tests.integration.prefect_live import (
    REPO_ROOT,
    open_browser,
)

ROUNDS, ENVS = 5, 20
dashboard_cli = importlib.import_module("spade.cli.dashboard")  # spade.cli.dashboard: the command


@pytest.fixture(scope="module")
def camp(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return build_campaign(root, "demo", rounds=ROUNDS, environments=ENVS, in_progress=True)


def test_rounds_tab_shows_the_campaign_numbers(camp, monkeypatch):
    at = run_app(monkeypatch, camp.root, "demo")
    last = camp.expected[ROUNDS - 1]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Win rate (hinted)"] == f"{last['hinted_win_rate']:.3f}"
    assert metrics["Win rate (unhinted)"] == f"{last['win_rate']:.3f}"
    assert metrics["Mean return (unhinted)"] == f"{last['mean_return']:.3f}"
    assert metrics["Regret"] == f"{last['regret']:.3f}"
    assert metrics["Acceptance"] == f"{last['acceptance_rate']:.3f}"
    assert metrics["Memory"] == str(last["memory_size"])
    assert f"{ROUNDS + 1} rounds · last complete round: {ROUNDS - 1}" in at.caption[0].value
    got = charts(at)
    wins = chart_with(got, "hinted win", "unhinted win", "held-out win", "unhinted return")
    regret = chart_with(got, "regret", "designer_reward")
    memory = chart_with(got, "memory_size")
    loss = chart_with(got, "agent_loss", "designer_loss")
    stages = chart_with(got, "evaluate", "train_agent")
    suites = chart_with(got, *SUITES)
    for rnd, want in camp.expected.items():
        for name, suite in want["heldout_suites"].items():
            assert suites[name][rnd] == pytest.approx(suite["score"])
        assert wins["hinted win"][rnd] == pytest.approx(want["hinted_win_rate"])
        assert wins["unhinted win"][rnd] == pytest.approx(want["win_rate"])
        assert wins["held-out win"][rnd] == pytest.approx(want["heldout_win_rate"])
        assert wins["unhinted return"][rnd] == pytest.approx(want["mean_return"])
        assert wins["hinted return"][rnd] == pytest.approx(want["hinted_mean_return"])
        assert wins["held-out return"][rnd] == pytest.approx(want["heldout_mean_return"])
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
    assert not at.dataframe  # the per-round table is drawn when its expander opens
    at.session_state["table"] = True
    table = at.run().dataframe[0].value
    assert table.loc[2, "accepted"] == camp.expected[2]["accepted"]
    suite = camp.expected[2]["heldout_suites"]["humaneval"]["score"]
    assert table.loc[2, "heldout_humaneval"] == pytest.approx(suite)


def test_the_page_opens_with_the_title_and_captions_sit_by_their_charts(camp, monkeypatch):
    at = run_app(monkeypatch, camp.root, "demo")
    elements = [el for el in at.main if el.type not in ("main", "flex_container", "column")]
    assert elements[0].type == "title" and elements[0].value == "Campaign demo"
    # the training charts' explanation is under their heading, right before them
    texts = [(el.type, getattr(el, "value", None)) for el in elements]
    heading = texts.index(("markdown", "**Training (agent and designer updates)**"))
    caption, first_chart_title, first_chart = texts[heading + 1 : heading + 4]
    assert caption[0] == "caption" and "sampler/trainer mismatch" in caption[1]
    assert first_chart_title == ("caption", "loss") and first_chart[0] == "vega_lite_chart"
    # Streamlit's magic writes any bare string of the script's top level (or a function's,
    # after its docstring) on the page: the script keeps none
    tree = ast.parse(Path(APP).read_text(encoding="utf-8"))
    bare = [
        node.lineno
        for holder in ast.walk(tree)
        for part in ("body", "orelse", "finalbody")  # a lambda's or an if-else's body: no list
        if isinstance(block := getattr(holder, part, None), list)
        for i, node in enumerate(block)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and not (part == "body" and i == 0
                 and isinstance(holder, ast.Module | ast.FunctionDef | ast.ClassDef))
    ]  # fmt: skip
    assert not bare, f"dashboards/app.py: strings Streamlit would show, at lines {bare}"


def test_gallery_shows_one_environment(camp, monkeypatch):
    at = run_app(monkeypatch, camp.root, "demo", "Environments")
    env = next(e for e in camp.envs.values() if e["accepted"])
    by_label(at.selectbox, "Environment").set_value(env["env_id"]).run()
    assert not at.exception
    assert at.code[0].value == env["code"].rstrip()
    markdown = "\n".join(m.value for m in at.markdown)
    assert f"Lanterns (article {ROUNDS - 1}." in markdown and env["doc_id"] in markdown
    assert "**splice** of `number_hunt` · directive `feedback` · wrote setup, play, solution" in (
        markdown
    )
    assert env["hint"] in [i.value for i in at.info]
    checks = at.dataframe[0].value
    assert list(checks["check"]) == [c["name"] for c in env["verdict"]["checks"]]
    assert len(at.chat_message) == 8  # one hinted and one unhinted play, 4 messages each
    history = chart_with(charts(at), "regret", "win_rate")
    assert set(history["regret"]) <= set(range(ROUNDS))


def test_gallery_shows_why_designs_were_rejected(camp, monkeypatch):
    at = run_app(monkeypatch, camp.root, "demo", "Environments")
    by_label(at.radio, "Designs").set_value("rejected").run()
    rejected = next(e for e in camp.envs.values() if not e["accepted"])  # round 4: infeasible
    (error,) = at.error
    assert error.value.startswith("Rejected: infeasible · failed verifier check `feasibility`")
    assert rejected["failure_reason"] in error.value
    assert at.code[0].value == rejected["code"].rstrip()
    checks = at.dataframe[0].value
    assert list(checks.loc[checks["passed"] == "✗", "check"]) == ["feasibility"]
    markdown = "\n".join(m.value for m in at.markdown)
    assert rejected["doc_id"] in markdown and f"Lanterns (article {ROUNDS - 1}." in markdown
    # round 2's first design failed to parse: no code and no verdict, but what the model wrote
    by_label(at.selectbox, "Round").set_value(2).run()
    by_label(at.radio, "Designs").set_value("rejected").run()
    env = by_label(at.selectbox, "Environment")
    parse = next(o for o in env.options if o.endswith("· parse"))
    env.select(parse).run()
    (error,) = at.error
    assert "Rejected: parse · never reached the verifier · no ```python block" in error.value
    assert at.code[0].value == "I cannot."  # the completion, since no code was extracted
    assert any("none: the design never reached the verifier" in c.value for c in at.caption)


def test_gallery_opens_on_rejections_when_none_was_accepted(tmp_path, monkeypatch):
    camp = build_campaign(tmp_path, "none-ok", rounds=1, environments=2, accept=False)
    at = run_app(monkeypatch, camp.root, "none-ok", "Environments")
    assert by_label(at.radio, "Designs").value == "rejected"
    assert "0 accepted, 4 rejected" in [c.value for c in at.caption]
    assert at.error and at.error[0].value.startswith("Rejected: ")


def test_heldout_tab_shows_suites_items_and_transcripts(camp, monkeypatch):
    at = run_app(monkeypatch, camp.root, "demo", "Held-out")
    last = camp.expected[ROUNDS - 1]
    metrics = {m.label: m.value for m in at.metric}
    for name, suite in last["heldout_suites"].items():
        assert metrics[name] == f"{suite['score']:.3f}"
    assert "win rate " + f"{last['heldout_win_rate']:.3f}" in "\n".join(
        m.value for m in at.markdown
    )
    across = at.dataframe[0].value  # the base weights first, then every round, with intervals
    assert list(across["weights"]) == ["base"] + [f"r{r:04d}-designer" for r in range(ROUNDS)]
    assert across["mean_return"][0] == 0.25 and across["win_rate_high"][0] > 0
    last_row = across.iloc[-1]
    assert last_row["win_rate"] == pytest.approx(last["heldout_win_rate"])
    assert last_row["win_rate_low"] <= last_row["win_rate"] <= last_row["win_rate_high"]
    files = at.dataframe[1].value
    assert list(files["file"]) == [f"held{i}.py" for i in range(4)]
    for name in SUITES:
        by_label(at.radio, "Suite").set_value(name).run()
        items = at.dataframe[2].value
        want = [i for i in last["heldout_items"] if i["suite"] == name]
        assert list(items["task_id"]) == [i["task_id"] for i in want]
        assert list(items["score"]) == [i["score"] for i in want]
        assert list(items["status"]) == [i["status"] for i in want]
        failures = [f"{i['failure']['kind']}: {i['failure']['reason']}" if i["failure"] else "" for i in want]  # fmt: skip
        assert list(items["failure"]) == failures
        task = want[-1]["task_id"]
        by_label(at.selectbox, "Transcript of task").set_value(task).run()
        assert not at.exception
        texts = [c.children[0].value for c in at.chat_message]
        assert texts == [f"[task {task}] Solve it (round {ROUNDS - 1}).", f"answer to {task}"]
    by_label(at.selectbox, "Held-out round").set_value(1).run()
    assert {m.label: m.value for m in at.metric}["humaneval"] == (
        f"{camp.expected[1]['heldout_suites']['humaneval']['score']:.3f}"
    )


def test_memory_tab_and_empty_store(camp, monkeypatch, tmp_path):
    at = run_app(monkeypatch, camp.root, "demo", "Memory")
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
    open_tab(at, "Environments")
    by_label(at.selectbox, "Environment").set_value(env["env_id"]).run()
    assert at.code[0].value == env["code"].rstrip() and len(at.chat_message) == 8
    open_tab(at, "Held-out")  # suite items and transcripts read from S3 too
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["reasoning_gym"] == f"{camp.expected[1]['heldout_suites']['reasoning_gym']['score']:.3f}"  # fmt: skip
    assert (
        len(at.dataframe[2].value) == len(SUITES["bfcl_multi_turn"]) and len(at.chat_message) == 2
    )


def test_cli_builds_the_streamlit_command(camp, monkeypatch):
    started: list[list[str]] = []

    class FakeProc:
        def __init__(self, cmd):
            started.append(cmd)

        def wait(self, timeout=None):
            return 0

        def poll(self):  # ended at once: the CLI does not wait for its health check
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
    assert cmd[1:4] == [str(REPO_ROOT / "dashboards" / "serve.py"), "run", APP]
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
        page.get_by_role("tab", name="Held-out").click()
        suite = last["heldout_suites"]["humaneval"]["score"]
        metric = page.locator('[data-testid="stMetric"]').filter(has_text="humaneval")
        metric.get_by_text(f"{suite:.3f}", exact=True).wait_for(timeout=20_000)
        page.get_by_text(f"Solve it (round {ROUNDS - 1}).").first.wait_for(timeout=20_000)
        page.screenshot(path=str(tmp_path / "heldout.png"), full_page=True)
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    print(f"screenshots: {tmp_path / 'dashboard.png'} {tmp_path / 'gallery.png'} {tmp_path / 'heldout.png'}")  # fmt: skip
