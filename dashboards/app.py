"""The SPADE campaign dashboard (Streamlit): a campaign read straight from its object store.

    spade dashboard CAMPAIGN_ID --store ./runs
    streamlit run dashboards/app.py -- --store s3://bucket/runs --campaign ID \\
        --storage-options '{"endpoint_url": "http://127.0.0.1:9000"}'

Without flags the settings come from ``SPADE_DASHBOARD_STORE``, ``SPADE_DASHBOARD_CAMPAIGN`` and
``SPADE_DASHBOARD_STORAGE_OPTIONS`` (flags win). Three tabs: per-round charts, an environment
gallery, and the environment memory. Per-round numbers come from the small per-round files
(cached on the stage manifests, re-checked every ``REFRESH_S`` seconds or on "Refresh");
code, documents and transcripts are read only for the environment on screen.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from spade.dashboard import CampaignData, Overview
from spade.dashboard.data import campaign_ids
from spade.storage import STAGES, ObjectStore

REFRESH_S = 30.0
WIN_RATES = {"hinted_win_rate": "hinted", "win_rate": "unhinted", "heldout_win_rate": "held-out"}


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


@st.cache_resource(show_spinner=False)
def campaign_data(store: str, campaign: str, options: str) -> CampaignData:
    """One loader per campaign for the server's lifetime (its caches serve every session)."""
    return CampaignData(store, campaign, json.loads(options))


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def rates(where: Any, df: pd.DataFrame) -> None:
    """Lines of rates over rounds on a fixed 0..1 axis (so a flat line looks flat)."""
    long = df.reset_index().melt("round", var_name="series", value_name="value").dropna()
    chart = (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("round:Q", axis=alt.Axis(tickMinStep=1), title=None),
            y=alt.Y("value:Q", scale=alt.Scale(domain=[0, 1]), title=None),
            color=alt.Color("series:N", legend=alt.Legend(orient="bottom"), title=None),
            tooltip=["round:Q", "series:N", "value:Q"],
        )
    )
    where.altair_chart(chart, width="stretch")


def bars(where: Any, rows: dict[int, dict[str, Any]]) -> None:
    """Stacked bars of round -> {series: value} (missing: 0), or a note when there is none."""
    df = pd.DataFrame.from_dict(rows, orient="index").fillna(0).rename_axis("round")
    if df.empty or not len(df.columns):
        where.caption("nothing yet")
    else:
        where.bar_chart(df)


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


def rounds_tab(data: CampaignData, ov: Overview) -> None:
    df = pd.DataFrame(ov.rows()).set_index("round")
    left, right = st.columns(2)
    left.markdown("**Win rate: hinted vs unhinted**")
    rates(left, df[list(WIN_RATES)].rename(columns=WIN_RATES))
    right.markdown("**Regret and designer reward**")
    right.line_chart(df[["regret", "designer_reward"]])
    left, right = st.columns(2)
    left.markdown("**Acceptance rate**")
    rates(left, df[["acceptance_rate"]])
    right.markdown("**Rejections by failure kind**")
    bars(right, {r.round: r.rejections for r in ov.rounds})
    left, right = st.columns(2)
    left.markdown("**Skill mix (accepted designs)**")
    bars(left, {r.round: r.skills for r in ov.rounds})
    right.markdown("**Memory size**")
    right.line_chart(df[["memory_size"]])
    st.markdown("**Training (agent and designer updates)**")
    for col, metric in zip(st.columns(3), ("loss", "kl", "clip_fraction"), strict=True):
        col.caption(metric)
        col.line_chart(df[[f"agent_{metric}", f"designer_{metric}"]])
    st.markdown("**Stage durations (s)**")
    bars(st.container(), {r.round: r.stage_seconds for r in ov.rounds})
    scored = [r.round for r in ov.rounds if r.attempts]
    if scored:
        rnd = st.selectbox("Rejections by verifier check in round", scored, index=len(scored) - 1)
        checks = data.rejected_checks(rnd)
        if checks:
            series = pd.Series(checks, name="designs").rename_axis("check")
            st.bar_chart(series, horizontal=True, height=80 + 40 * len(checks))
        else:
            st.caption("No design was rejected in this round.")
    st.markdown("**Per-round numbers**")
    st.dataframe(df, width="stretch")


def env_label(env: dict[str, Any]) -> str:
    what = f"regret {fmt(env.get('regret'))}" if env.get("accepted") else env.get("failure")
    return f"{env.get('env_id')} · {env.get('skill')} · {what or 'rejected'}"


def gallery_tab(data: CampaignData, ov: Overview) -> None:
    rounds = [r for r in ov.rounds if r.envs]
    if not rounds:
        st.info("No environments scored yet.")
        return
    left, right = st.columns([1, 3])
    which = left.selectbox("Round", [r.round for r in rounds], index=len(rounds) - 1)
    summary = ov.round(which)
    show = left.radio("Designs", ["accepted", "rejected", "all"], horizontal=True)
    envs = [
        e
        for e in (summary.envs if summary else [])
        if show == "all" or bool(e.get("accepted")) == (show == "accepted")
    ]
    if not envs:
        right.info(f"No {show} designs in round {which}.")
        return
    by_id = {e["env_id"]: e for e in envs}
    env = by_id[
        right.selectbox("Environment", list(by_id), format_func=lambda i: env_label(by_id[i]))
    ]
    detail = data.env_detail(which, env["env_id"])
    items = [("win rate", "win_rate"), ("hinted", "hinted_win_rate"), ("regret", "regret")]
    for col, (label, key) in zip(st.columns(4), [*items, ("reward", "reward")], strict=True):
        col.metric(label, fmt(env.get(key)))
    if not env.get("accepted"):
        reason = (detail.attempt or {}).get("failure_reason") or ""
        st.error(f"Rejected: {env.get('failure')} {reason}")
    code_col, side = st.columns([3, 2])
    code_col.markdown("**Code**")
    code_col.code(detail.code or "# no code was extracted", language="python", line_numbers=True)
    side.markdown(f"**Grounding document** `{(detail.attempt or {}).get('doc_id', '-')}`")
    side.container(height=220).markdown(detail.document or "_not found_")
    side.markdown("**Hint**")
    side.info(detail.hint or "no hint")
    side.markdown("**Verifier checks**")
    checks = (detail.verdict or {}).get("checks") or []
    rows = [
        {"check": c["name"], "passed": "✓" if c["passed"] else "✗", "reason": c["reason"]}
        for c in checks
    ]
    table = pd.DataFrame(rows, columns=["check", "passed", "reason"])
    side.dataframe(table, hide_index=True, width="stretch")
    history = ov.env_history(env["env_id"])
    if history:
        st.markdown("**Regret history**")
        st.line_chart(pd.DataFrame(history).set_index("round")[["regret", "win_rate"]])
    transcripts(data.trajectories(which, env["env_id"]))


def transcripts(plays: list[dict[str, Any]]) -> None:
    """One chosen play of each group, as a chat."""
    if not plays:
        return
    st.markdown("**Sample transcripts**")
    groups = (("hinted", True), ("unhinted", False))
    for col, (label, hinted) in zip(st.columns(2), groups, strict=True):
        group = [p for p in plays if bool(p.get("hinted")) == hinted]
        col.markdown(f"*{label}* ({len(group)} plays)")
        if not group:
            continue
        names = [
            f"seed {p['seed']} · return {fmt(p.get('return'), 1)} · {p['status']}" for p in group
        ]
        pick = col.selectbox(
            f"{label} play", range(len(group)), format_func=names.__getitem__, key=f"play-{label}"
        )
        play = group[pick]
        for m in play.get("messages") or []:
            with col.chat_message(m.get("role", "user")):
                st.text(m.get("content") or json.dumps(m.get("tool_calls"), indent=1))


def memory_tab(data: CampaignData, ov: Overview) -> None:
    state = data.memory()
    if not state:
        st.info("No memory has been committed yet.")
        return
    records = state.get("records") or []
    st.markdown(f"**{len(records)} of {state.get('capacity')} designs remembered** (oldest first)")
    cols = ["env_id", "skill", "round", "win_rate", "regret", "accepted", "hint"]
    st.dataframe(pd.DataFrame(records, columns=cols), hide_index=True, width="stretch")
    if records:
        newest = records[::-1]
        labels = [f"{r['env_id']} · {r['skill']} · round {r['round']}" for r in newest]
        pick = st.selectbox(
            "Remembered design (newest first)", range(len(newest)), format_func=labels.__getitem__
        )
        st.code(newest[pick].get("code_head") or "", language="python")


def main() -> None:
    try:  # bad settings: say so on the page instead of a traceback
        store, campaign, options = settings()
    except ValueError as exc:  # json.JSONDecodeError is one
        st.error(f"Bad dashboard settings: {exc}")
        return
    st.set_page_config(page_title=f"SPADE · {campaign or 'campaigns'}", layout="wide")
    objects = ObjectStore(store, options)
    with st.sidebar:
        st.markdown(f"**Store** `{objects.url()}`")
        known = campaign_ids(objects)
        if campaign and campaign not in known:
            known = [campaign, *known]
        if known:
            index = known.index(campaign) if campaign else 0
            campaign = st.selectbox("Campaign", known, index=index)
        refresh = st.button("Refresh")
    if not campaign:
        st.error(f"No campaigns in {objects.url()}")
        return
    data = campaign_data(store, campaign, json.dumps(options, sort_keys=True))
    ov = data.overview(max_age_s=0.0 if refresh else REFRESH_S)
    st.title(f"Campaign {campaign}")
    done = [r.round for r in ov.rounds if r.complete]
    last = done[-1] if done else "-"
    st.caption(f"{ov.store_url} · {len(ov.rounds)} rounds · last complete round: {last}")
    if not ov.rounds:
        st.warning("This campaign has no rounds yet.")
        return
    headline(ov)
    rounds, envs, memory = st.tabs(["Rounds", "Environments", "Memory"])
    with rounds:
        rounds_tab(data, ov)
    with envs:
        gallery_tab(data, ov)
    with memory:
        memory_tab(data, ov)


main()
