"""The dashboard on a campaign of the demo config (``configs/demo-cpu.yaml``), made by the real
campaign flow: the demo's managed llama.cpp server and LoRA training on CPU, the verifier and
the held-out plays in nsjail.

The campaign is the demo's, made smaller only through the demo's own settings (one round, one
design slot with one attempt, one held-out play per environment file; the held-out suites'
seeded subsets as the demo has them) and served by SmolLM2-135M (the demo's Qwen2.5-Coder-0.5B
takes minutes per round here), so that it takes a minute or two. The 135M model seldom writes a valid environment, so its designs are
usually all rejected: the checks read what the store holds (the raw stage outputs, not through
the dashboard's loader) and expect the page to show it, whatever the model did: the headline
numbers, the charts' data (AppTest), the gallery's rejections with their reasons, documents and
code or completion, and the held-out results; headless Chromium renders the served dashboard
and screenshots go to the test's ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from statistics import fmean
from typing import Any

import pytest

from flows.campaign import campaign_flow
from spade.config import CampaignConfig, load_config
from spade.inference.pool import close_shared_backends
from spade.storage import CampaignStore, ObjectStore
from tests.dashboard.apptest import by_label, chart_with, charts, open_tab, run_app
from tests.dashboard.serve import served_dashboard
from tests.integration.prefect_live import REPO_ROOT, open_browser

# The campaign (made once, by the first test) takes two to three minutes on two cores: slow
# (.ci/run). What `make test` checks of it, faster: the dashboard on a campaign the real flow
# made (tests/dashboard/test_real_campaign.py), the app on S3 and in a browser
# (tests/dashboard/test_app.py); the demo config (tests/test_presets.py); llama.cpp serving the
# shipped SmolLM2 and a published LoRA (tests/inference/test_llamacpp*.py).
pytestmark = [pytest.mark.sandbox, pytest.mark.slow, pytest.mark.timeout(900)]
DEMO = REPO_ROOT / "configs" / "demo-cpu.yaml"
CAMPAIGN = "demo-cpu"
MIN_CHARTS = 6  # win rates, reward, acceptance, rejections, suites, stages, checks: 7 here
ALL_CHARTS_DRAWN = """(least) => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  const charts = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')];
  const drawn = charts.filter((c) => c.querySelector('canvas, svg.marks'));
  return charts.length >= least && drawn.length === charts.length;
}"""
SMALLER = {  # the demo's settings, fewer of each: what keeps the campaign to a few minutes
    "model.name_or_path": "smollm2-135m-instruct",
    "run.rounds": 1,
    "designer.envs_per_round": 1,
    "designer.attempts_per_slot": 1,
    "designer.samples_per_slot": 1,
    "evaluation.unhinted_plays": 1,
}


@dataclass
class Demo:
    """The campaign's store and what its round 0 wrote, read back raw."""

    root: str
    cfg: CampaignConfig
    scored: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    documents: dict[str, str]
    heldout: dict[str, Any]
    heldout_files: list[dict[str, Any]]
    heldout_items: list[dict[str, Any]]


def _jsonl(cs: CampaignStore, stage: str, name: str) -> list[dict[str, Any]]:
    data = cs.store.read_bytes(cs.layout.stage_key(0, stage, name))
    return [json.loads(line) for line in data.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def demo(tmp_path_factory, smol_cache, prefect_api) -> Demo:
    root = str(tmp_path_factory.mktemp("demo-store"))
    shipped = load_config(DEMO).run  # its paths are relative to the repository's root
    heldout = [str(REPO_ROOT / e) for e in shipped.heldout_envs]
    pool = [str(REPO_ROOT / e) for e in shipped.env_pool or []]
    paths = {"run.heldout_envs": heldout, "run.env_pool": pool}
    cfg = load_config(DEMO, {**SMALLER, "storage.root": root, **paths})

    async def run() -> None:
        try:
            await campaign_flow(config=cfg, campaign_id=CAMPAIGN, rounds=1)
        finally:  # the in-process SmolLM2 is pooled: let it go with the campaign
            await close_shared_backends()

    t0 = time.monotonic()  # printed only: how long the demo takes is bench/ business
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPADE_CACHE", str(smol_cache))  # the converted model, kept between runs
        asyncio.run(run())
    print(f"demo campaign in {time.monotonic() - t0:.0f} s: {root}")
    cs = CampaignStore(ObjectStore(root), CAMPAIGN)
    docs = _jsonl(cs, "sample_documents", "documents.jsonl")
    return Demo(
        root,
        cfg,
        _jsonl(cs, "score", "scored.jsonl"),
        _jsonl(cs, "verify", "attempts.jsonl"),
        {d["doc_id"]: d["text"] for d in docs},
        cs.store.read_json(cs.layout.stage_key(0, "heldout", "summary.json")),
        _jsonl(cs, "heldout", "results.jsonl"),
        _jsonl(cs, "heldout", "suites.jsonl"),
    )


def designs(demo: Demo) -> list[dict[str, Any]]:
    """The scored rows of design attempts (the rest are the pool environments the round
    played to reach the demo's run.min_envs)."""
    return [s for s in demo.scored if s["source"] == "designed"]


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def expected(demo: Demo) -> dict[str, str]:
    """The headline numbers the page should show, from the raw scored rows: acceptance and the
    designer's reward (before centring) of the designs, win rates and regret of every
    environment played (accepted designs and pool environments)."""
    ok = [s for s in designs(demo) if s["accepted"]]
    played = [s for s in demo.scored if s["accepted"]]
    mean = lambda rows, k: fmean(r[k] for r in rows) if rows else None  # noqa: E731
    return {
        "Acceptance": fmt(len(ok) / len(designs(demo))),
        "Win rate (unhinted)": fmt(mean(played, "win_rate")),
        "Win rate (hinted)": fmt(mean(played, "hinted_win_rate")),
        "Regret": fmt(mean(played, "regret")),
        "Designer reward": fmt(mean(designs(demo), "raw_reward")),
        "Held-out win rate": fmt(demo.heldout["win_rate"]),
    }


def rejection_text(attempt: dict[str, Any], failure: str) -> str:
    check = (attempt.get("verdict") or {}).get("failed_check")
    where = f"failed verifier check `{check}`" if check else "never reached the verifier"
    return f"Rejected: {failure} · {where} · {attempt['failure_reason']}"


def test_the_demo_campaign_is_the_demo_config(demo):
    assert demo.cfg.name == "demo-cpu" and demo.cfg.model.name_or_path == "smollm2-135m-instruct"
    shipped = load_config(DEMO)  # the demo itself runs the 0.5B coder on the same backend
    assert shipped.model.name_or_path == "qwen2.5-coder-0.5b-instruct"
    assert demo.cfg.inference.backend == shipped.inference.backend == "llamacpp"
    assert demo.cfg.corpus.path == "builtin:wiki"
    assert len(designs(demo)) == len(demo.attempts) == 1 and len(demo.heldout_files) == 3
    # run.min_envs 2: the pool fills what the design did not
    pool = [s for s in demo.scored if s["source"] == "pool"]
    assert len(pool) == 2 - designs(demo)[0]["accepted"]
    suites = {s.name: s.size for s in demo.cfg.run.heldout_suites}
    assert demo.heldout["environments"] == 3 and set(demo.heldout["suites"]) == set(suites)
    for name, size in suites.items():
        assert sum(i["suite"] == name for i in demo.heldout_items) == size


def test_page_numbers_and_charts_are_the_stores(demo, monkeypatch):
    at = run_app(monkeypatch, demo.root, CAMPAIGN)
    metrics = {m.label: m.value for m in at.metric}
    for label, value in expected(demo).items():
        assert metrics[label] == value, label
    got = charts(at)
    acceptance = chart_with(got, "acceptance_rate")["acceptance_rate"]
    ok = sum(s["accepted"] for s in designs(demo))
    assert acceptance == {0: pytest.approx(ok / len(designs(demo)))}
    wins = chart_with(got, "held-out win", "held-out return")
    assert wins["held-out win"] == {0: pytest.approx(demo.heldout["win_rate"])}
    assert wins["held-out return"] == {0: pytest.approx(demo.heldout["mean_return"])}
    reward = chart_with(got, "designer_reward")["designer_reward"]
    assert reward == {0: pytest.approx(fmean(s["raw_reward"] for s in designs(demo)))}
    scores = chart_with(got, *demo.heldout["suites"])  # one line per held-out suite
    for name, suite in demo.heldout["suites"].items():
        assert scores[name] == {0: pytest.approx(suite["score"])}
    kinds = {s["failure"] for s in designs(demo) if not s["accepted"]}
    for kind in kinds:  # rejections by failure kind
        assert chart_with(got, kind)[kind][0] == sum(s["failure"] == kind for s in designs(demo))


def test_gallery_and_heldout_tabs_show_the_stores_rejections(demo, monkeypatch):
    at = run_app(monkeypatch, demo.root, CAMPAIGN, "Environments")
    (attempt,), (scored,) = demo.attempts, designs(demo)
    if scored["accepted"]:  # the model wrote a valid environment: the gallery opens on it
        assert by_label(at.radio, "Designs").value == "accepted"
        assert at.code[0].value == attempt["code"].rstrip()
    else:
        assert by_label(at.radio, "Designs").value == "rejected"
        (error,) = at.error
        assert error.value == rejection_text(attempt, scored["failure"])
        shown = attempt["code"] if attempt["code"] is not None else attempt["completion"]
        assert at.code[0].value == (shown or "(empty completion)").rstrip()
    markdown = "\n".join(m.value for m in at.markdown)
    assert attempt["doc_id"] in markdown
    assert demo.documents[attempt["doc_id"]][:60] in markdown
    at = open_tab(at, "Held-out")
    across = at.dataframe[0].value  # round 0 played the base weights too
    assert across["weights"].iloc[0] == "base" and across["round"].isna().iloc[0]
    files = at.dataframe[1].value
    assert list(files["file"]) == [r["file"] for r in demo.heldout_files]
    assert list(files["win_rate"]) == [r["win_rate"] for r in demo.heldout_files]
    metrics = {m.label: m.value for m in at.metric}
    for name, suite in demo.heldout["suites"].items():
        assert metrics[name] == fmt(suite["score"])
        by_label(at.radio, "Suite").set_value(name).run()
        items = at.dataframe[2].value
        want = [i for i in demo.heldout_items if i["suite"] == name]
        assert list(items["task_id"]) == [i["task_id"] for i in want]
        assert list(items["score"]) == [i["score"] for i in want]
        assert list(items["status"]) == [i["status"] for i in want]
        assert at.chat_message, name  # the selected task's transcript


def test_browser_renders_the_demo_campaign(demo, tmp_path):
    want = expected(demo)
    (attempt,), (scored,) = demo.attempts, designs(demo)
    shots = {name: tmp_path / f"demo-{name}.png" for name in ("rounds", "gallery", "heldout")}
    with (
        served_dashboard(demo.root, CAMPAIGN, tmp_path / "dashboard.log") as url,
        open_browser() as browser,
    ):
        page = browser.new_page(viewport={"width": 1600, "height": 2400})
        page.goto(url)
        page.get_by_text(f"Campaign {CAMPAIGN}").wait_for(timeout=60_000)
        for label in ("Acceptance", "Held-out win rate", "Designer reward"):
            metric = page.locator('[data-testid="stMetric"]').filter(has_text=label)
            metric.get_by_text(want[label], exact=True).wait_for(timeout=30_000)
        # every chart drawn (one round with nothing accepted: those without data are a note)
        page.wait_for_function(ALL_CHARTS_DRAWN, arg=MIN_CHARTS, polling="raf", timeout=30_000)
        page.screenshot(path=str(shots["rounds"]), full_page=True)

        page.get_by_role("tab", name="Environments").click()
        page.locator('[data-testid="stCode"]').first.wait_for(timeout=30_000)
        page.get_by_text(attempt["doc_id"]).first.wait_for(timeout=30_000)
        if not scored["accepted"]:
            reason = attempt["failure_reason"].splitlines()[0][:80]
            error = page.locator('[data-testid="stAlert"]').filter(has_text="Rejected:")
            error.get_by_text(reason, exact=False).wait_for(timeout=30_000)
        page.screenshot(path=str(shots["gallery"]), full_page=True)

        page.get_by_role("tab", name="Held-out").click()
        held = f"win rate {want['Held-out win rate']}"
        page.get_by_text(held, exact=False).first.wait_for(timeout=30_000)
        for name, suite in demo.heldout["suites"].items():
            metric = page.locator('[data-testid="stMetric"]').filter(has_text=name)
            metric.get_by_text(fmt(suite["score"]), exact=True).wait_for(timeout=30_000)
        page.locator('[data-testid="stDataFrame"]').nth(1).wait_for(timeout=30_000)
        page.locator('[data-testid="stChatMessage"]').first.wait_for(timeout=30_000)
        page.screenshot(path=str(shots["heldout"]), full_page=True)
    for path in shots.values():
        assert path.stat().st_size > 10_000, path
    print("screenshots:", *(str(p) for p in shots.values()))
