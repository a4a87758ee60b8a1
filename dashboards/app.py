"""The SPADE campaign dashboard (Streamlit): a campaign read straight from its object store.

    spade dashboard CAMPAIGN_ID --store ./runs
    python dashboards/serve.py run dashboards/app.py -- --store s3://bucket/runs --campaign ID \\
        --storage-options '{"endpoint_url": "http://127.0.0.1:9000"}'

(``streamlit run dashboards/app.py -- ...`` works too, without the warm start of serve.py.)
Without flags the settings come from ``SPADE_DASHBOARD_STORE``, ``SPADE_DASHBOARD_CAMPAIGN`` and
``SPADE_DASHBOARD_STORAGE_OPTIONS`` (flags win). Four tabs: per-round charts, an environment
gallery (accepted and rejected designs), held-out results (environment files and benchmark
suites, with transcripts), and the environment memory.

What keeps a page load quick: per-round numbers come from the small per-round files, read
once per server (``spade.dashboard.data.loader``) and re-read in the background every
``REFRESH_S`` seconds (synchronously on "Refresh"); charts are plain Vega-Lite dicts
(``spade.dashboard.charts``, no Altair); only the open tab runs; code, documents and
transcripts are read only for what is on screen.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

if (here := str(Path(__file__).resolve().parent)) not in sys.path:
    sys.path.insert(0, here)  # detail_tabs.py beside this file (streamlit run adds it, AppTest not)

from detail_tabs import fmt, gallery_tab, heldout_tab, memory_tab, show

from spade.dashboard import CampaignData, Overview, charts
from spade.dashboard.data import campaign_ids, loader
from spade.storage import STAGES, ObjectStore

REFRESH_S = 30.0
TABS = ("Rounds", "Environments", "Held-out", "Memory")
# The training charts, a row of three each, with the caption shown above them. (No bare string
# at the top level of this script: Streamlit's "magic" writes it on the page, above the title.)
TRAIN_CHARTS = (
    ("loss", "kl", "clip_fraction"),
    ("mismatch_kl", "mismatch_outside", "zero_variance_groups"),
)
TRAIN_CAPTION = (
    "Each role's update per round (agent_*, designer_*): the loss, the KL and the share of"
    " clipped ratios; below, the sampler/trainer mismatch (k3 KL, share of ratios outside"
    " [0.5, 2]) and the share of groups without a gradient."
)


def settings() -> tuple[str, str | None, dict[str, Any]]:
    """Store root, campaign id and storage options from the script's flags or environment."""
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="dashboards/app.py", allow_abbrev=False)
    parser.add_argument("--store", default=env("SPADE_DASHBOARD_STORE", "./runs"))
    parser.add_argument("--campaign", default=env("SPADE_DASHBOARD_CAMPAIGN"))
    parser.add_argument("--storage-options", default=env("SPADE_DASHBOARD_STORAGE_OPTIONS") or "{}")
    args, _unknown = parser.parse_known_args()  # under AppTest, argv is pytest's
    options = json.loads(args.storage_options)
    if not isinstance(options, dict):
        raise ValueError(f"--storage-options must be a JSON object, not {options!r}")
    return args.store, args.campaign, options


@st.cache_data(ttl=REFRESH_S, show_spinner=False)
def known_campaigns(store: str, options: str) -> list[str]:
    """The store's campaigns (a listing; on S3 a request), re-listed every ``REFRESH_S``."""
    return campaign_ids(ObjectStore(store, json.loads(options)))


def headline(ov: Overview) -> None:
    """The latest scored round's numbers, with the change since the round before."""
    scored = [r for r in ov.rounds if r.attempts]
    if not scored:
        st.info("No round has been scored yet.")
        return
    last, prev = scored[-1], (scored[-2] if len(scored) > 1 else None)
    st.subheader(f"Round {last.round}")
    if not ov.rounds[-1].complete:
        now = ov.rounds[-1]
        done = f"{len(now.stages_done)} of {len(STAGES)}"
        st.caption(f"Round {now.round} in progress: {done} stages committed")
    items = [
        ("Win rate (hinted)", "hinted_win_rate"),
        ("Win rate (unhinted)", "win_rate"),
        ("Mean return (unhinted)", "mean_return"),
        ("Regret", "regret"),
        ("Designer reward", "designer_reward"),
        ("Acceptance", "acceptance_rate"),
        ("Held-out win rate", "heldout_win_rate"),
        ("Memory", "memory_size"),
    ]
    for col, (label, key) in zip(st.columns(len(items)), items, strict=True):
        now, before = getattr(last, key), getattr(prev, key) if prev else None
        delta = fmt(now - before) if isinstance(now, int | float) and before is not None else None
        col.metric(label, fmt(now), delta)


def per_round(ov: Overview, **fields: str) -> Any:
    """A long table of round attributes: ``label=attribute``."""
    rows = {r.round: {k: getattr(r, a) for k, a in fields.items()} for r in ov.rounds}
    return charts.per_round(rows)


def rounds_tab(data: CampaignData, ov: Overview) -> None:
    rs = ov.rounds
    left, right = st.columns(2)
    left.markdown("**Win rate (solid) and mean return (dashed): hinted, unhinted, held-out**")
    wins = {"hinted win": "hinted_win_rate", "unhinted win": "win_rate",
            "held-out win": "heldout_win_rate", "hinted return": "hinted_mean_return",
            "unhinted return": "mean_return", "held-out return": "heldout_mean_return"}  # fmt: skip
    show(left, charts.lines(per_round(ov, **wins), unit_range=True, dashed="return"))
    right.markdown("**Regret (and paired, per instance) and designer reward**")
    regrets = {"regret": "regret", "paired regret": "paired_regret"}
    show(right, charts.lines(per_round(ov, **regrets, designer_reward="designer_reward")))
    left, right = st.columns(2)
    left.markdown("**Acceptance rate**")
    show(left, charts.lines(per_round(ov, acceptance_rate="acceptance_rate"), unit_range=True))
    right.markdown("**Rejections by failure kind**")
    show(right, charts.stacked_bars(charts.per_round({r.round: r.rejections for r in rs})))
    left, right = st.columns(2)
    left.markdown("**Skill mix (accepted designs)**")
    show(left, charts.stacked_bars(charts.per_round({r.round: r.skills for r in rs})))
    right.markdown("**Memory size**")
    show(right, charts.lines(per_round(ov, memory_size="memory_size")))
    st.markdown("**Held-out suites: mean item score per round**")
    suites = {r.round: {n: s.get("score") for n, s in r.heldout_suites.items()} for r in rs}
    show(st.container(), charts.lines(charts.per_round(suites), unit_range=True), "no suites")
    st.markdown("**Training (agent and designer updates)**")
    st.caption(TRAIN_CAPTION)
    for row in TRAIN_CHARTS:
        for col, metric in zip(st.columns(len(row)), row, strict=True):
            col.caption(metric)
            train = {
                r.round: {f"{role}_{metric}": r.train.get(role, {}).get(metric) for role in r.train}
                for r in rs
            }
            show(col, charts.lines(charts.per_round(train), height=180))
    st.markdown("**Stage durations (s)**")
    stages = charts.per_round({r.round: r.stage_seconds for r in rs})
    show(st.container(), charts.stacked_bars(stages))
    rejected_checks(data, [r.round for r in rs if r.attempts])
    # Collapsed and drawn only when opened: a table of hundreds of rounds costs the browser
    # more than all the charts together (about a second on two cores at 200 rounds).
    with st.expander("Per-round numbers", key="table", on_change="rerun") as table:
        if table.open:
            st.dataframe(pd.DataFrame(ov.rows()).set_index("round"), width="stretch")


@st.fragment
def rejected_checks(data: CampaignData, scored: list[int]) -> None:
    """Rejections by verifier check in one round (choosing another reruns this part only)."""
    if not scored:
        return
    rnd = st.selectbox("Rejections by verifier check in round", scored, index=len(scored) - 1)
    checks = data.rejected_checks(rnd)
    if checks:
        st.vega_lite_chart(charts.horizontal_bars(checks, "check", "designs"), width="stretch")
    else:
        st.caption("No design was rejected in this round.")


def main() -> None:
    try:  # bad settings: say so on the page instead of a traceback
        store, campaign, options = settings()
    except ValueError as exc:  # json.JSONDecodeError is one
        st.error(f"Bad dashboard settings: {exc}")
        return
    st.set_page_config(page_title=f"SPADE · {campaign or 'campaigns'}", layout="wide")
    options_json = json.dumps(options, sort_keys=True)
    with st.sidebar:
        st.markdown(f"**Store** `{ObjectStore(store, options).url()}`")
        refresh = st.button("Refresh")
        if refresh:  # the store's campaigns are listed again too
            known_campaigns.clear()
        known = known_campaigns(store, options_json)
        if campaign and campaign not in known:
            known = [campaign, *known]
        if known:
            index = known.index(campaign) if campaign else 0
            campaign = st.selectbox("Campaign", known, index=index)
    if not campaign:
        st.error(f"No campaigns in {ObjectStore(store, options).url()}")
        return
    data = loader(store, campaign, options_json)
    # A page load does not wait for a re-read of the store: an older overview is shown while
    # the next one is read in the background; "Refresh" waits for it.
    ov = data.overview(max_age_s=0.0 if refresh else REFRESH_S, wait=refresh)
    st.title(f"Campaign {campaign}")
    done = [r.round for r in ov.rounds if r.complete]
    last = done[-1] if done else "-"
    st.caption(f"{ov.store_url} · {len(ov.rounds)} rounds · last complete round: {last}")
    if not ov.rounds:
        st.warning("This campaign has no rounds yet.")
        return
    headline(ov)
    # Only the open tab's content runs (on_change="rerun"): the first page is the charts.
    tabs = st.tabs(TABS, key="tab", on_change="rerun")
    for tab, body in zip(tabs, (rounds_tab, gallery_tab, heldout_tab, memory_tab), strict=True):
        if tab.open:
            with tab:
                body(data, ov)


main()
