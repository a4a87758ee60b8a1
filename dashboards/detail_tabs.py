"""The dashboard's detail tabs (imported by ``dashboards/app.py``): the environment gallery,
held-out results, and the environment memory.

Each tab is a Streamlit fragment: choosing a round, a design or a transcript reruns that tab
only, not the charts. Files beyond the per-round numbers (code, documents, verdicts,
transcripts, held-out items) are read here, for what is on screen, through the campaign's
loader (memoised on the stage manifests).
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from spade.dashboard import CampaignData, EnvDetail, Overview, charts


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def show(where: Any, spec: charts.Spec, empty: str = "nothing yet") -> None:
    """A Vega-Lite chart, or a note where it would have no points."""
    if spec["datasets"][charts.DATASET].num_rows:
        where.vega_lite_chart(spec, width="stretch")
    else:
        where.caption(empty)


def chat(where: Any, messages: list[dict[str, Any]], height: int = 600) -> None:
    """A conversation as chat bubbles (tool calls as JSON), scrolling past ``height`` pixels
    (system prompts with tool lists run to pages)."""
    box = where.container(height=height)
    for m in messages:
        with box.chat_message(m.get("role") or "user"):
            st.text(m.get("content") or json.dumps(m.get("tool_calls"), indent=1))


def failure_text(failure: Any) -> str:
    """A play's or a design's failure, ``{"kind", "reason"}`` or text, on one line."""
    if isinstance(failure, dict):
        return f"{failure.get('kind')}: {failure.get('reason')}"
    return "" if failure is None else str(failure)


# -- environments ------------------------------------------------------------------------------


def env_label(env: dict[str, Any]) -> str:
    what = f"regret {fmt(env.get('regret'))}" if env.get("accepted") else env.get("failure")
    pool = " · pool" if env.get("source") == "pool" else ""
    return f"{env.get('env_id')} · {env.get('skill')}{pool} · {what or 'rejected'}"


@st.fragment
def gallery_tab(data: CampaignData, ov: Overview) -> None:
    rounds = [r for r in ov.rounds if r.envs]
    if not rounds:
        st.info("No environments scored yet.")
        return
    left, right = st.columns([1, 3])
    which = left.selectbox("Round", [r.round for r in rounds], index=len(rounds) - 1)
    every = (ov.round(which) or rounds[-1]).envs
    pool = [e for e in every if e.get("source") == "pool"]  # played, not designed
    designs = [e for e in every if e.get("source", "designed") == "designed"]
    accepted = sum(1 for e in designs if e.get("accepted"))
    played = f", {len(pool)} pool" if pool else ""
    left.caption(f"{accepted} accepted, {len(designs) - accepted} rejected{played}")
    # A round with no accepted design (a small model's usual round) opens on its rejections.
    options = ["accepted", "rejected", "pool", "all"]
    pick = left.radio("Designs", options, index=0 if accepted else 1, horizontal=True)
    if pick in ("all", "pool"):
        envs = every if pick == "all" else pool
    else:
        envs = [e for e in designs if bool(e.get("accepted")) == (pick == "accepted")]
    if not envs:
        right.info(f"No {pick} designs in round {which}.")
        return
    by_id = {e["env_id"]: e for e in envs}
    env = by_id[
        right.selectbox("Environment", list(by_id), format_func=lambda i: env_label(by_id[i]))
    ]
    detail = data.env_detail(which, env["env_id"])
    # the designer reward as the status table and the trackers show it: before centring (the
    # score row's "reward" is the centred one, the advantage the update trained on)
    raw = env.get("raw_reward", env.get("reward"))
    values = [env.get("win_rate"), env.get("hinted_win_rate"), env.get("regret"), raw]
    labels = ("win rate", "hinted", "regret", "designer reward")
    for col, label, value in zip(st.columns(4), labels, values, strict=True):
        col.metric(label, fmt(value))
    if not env.get("accepted"):
        st.error(rejection(env, detail))
    design(detail)
    history = ov.env_history(env["env_id"])
    if history:
        st.markdown("**Regret history**")
        rows = {h["round"]: {"regret": h["regret"], "win_rate": h["win_rate"]} for h in history}
        show(st.container(), charts.lines(charts.per_round(rows), unit_range=True))
    transcripts(data.trajectories(which, env["env_id"]))


def rejection(env: dict[str, Any], detail: EnvDetail) -> str:
    """Why a design was rejected: its failure kind, the verifier check it failed (or that it
    never reached the verifier) and the reason given."""
    attempt, verdict = detail.attempt or {}, detail.verdict or {}
    check = verdict.get("failed_check")
    checks = {c.get("name"): c.get("reason") for c in verdict.get("checks") or []}
    reason = attempt.get("failure_reason") or checks.get(check) or "no reason recorded"
    where = f"failed verifier check `{check}`" if check else "never reached the verifier"
    return f"Rejected: {env.get('failure') or 'rejected'} · {where} · {reason}"


def design(detail: EnvDetail) -> None:
    """The design's code (or, without code, what the model wrote), its grounding document,
    hint and verifier checks."""
    attempt = detail.attempt or {}
    code_col, side = st.columns([3, 2])
    if detail.code is not None:
        code_col.markdown("**Code**")
        code_col.code(detail.code, language="python", line_numbers=True)
    else:
        code_col.markdown("**What the model wrote** (no code could be extracted)")
        completion = attempt.get("completion") or "(empty completion)"
        code_col.container(height=600).code(completion, wrap_lines=True)
    if attempt.get("parent_id"):  # an edit or a splice: what it changed, and how
        how = f"**{attempt.get('strategy', 'edit')}** of `{attempt['parent_id']}`"
        if attempt.get("directive"):
            how += f" · directive `{attempt['directive']}`"
        if attempt.get("spliced"):
            how += f" · wrote {', '.join(attempt['spliced'])}"
        side.markdown(how)
    if (audit := attempt.get("solvability")) is not None:
        side.caption(f"solvability audit: {audit.get('solvable')} · {audit.get('reason')}")
    side.markdown(f"**Grounding document** `{attempt.get('doc_id', '-')}`")
    side.container(height=220).markdown(detail.document or "_not found_")
    side.markdown("**Hint**")
    side.info(detail.hint or "no hint")
    side.markdown("**Verifier checks**")
    checks = (detail.verdict or {}).get("checks") or []
    if not checks:
        side.caption("none: the design never reached the verifier")
        return
    rows = [
        {"check": c["name"], "passed": "✓" if c["passed"] else "✗", "reason": c["reason"]}
        for c in checks
    ]
    table = pd.DataFrame(rows, columns=["check", "passed", "reason"])
    side.dataframe(table, hide_index=True, width="stretch")


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
        chat(col, group[pick].get("messages") or [])


# -- held-out ----------------------------------------------------------------------------------

HELDOUT_COLUMNS = ["file", "skill", "win_rate", "mean_return", "failed_plays", "env_id"]
ITEM_COLUMNS = ["task_id", "score", "status", "turns", "failure"]


@st.fragment
def heldout_tab(data: CampaignData, ov: Overview) -> None:
    """One round's held-out results: the environment files' win rates, and each suite's
    score, items and transcripts."""
    rounds = [r for r in ov.rounds if "heldout" in r.stages_done]
    if not rounds:
        st.info("No held-out stage has committed yet.")
        return
    across = ov.heldout_table()
    if across:
        st.markdown(
            "**Held-out environments across rounds** (95% intervals over the plays; the first"
            " row, round empty, is the base weights before any training)"
        )
        st.dataframe(pd.DataFrame(across), hide_index=True, width="stretch")
    which = st.selectbox("Held-out round", [r.round for r in rounds], index=len(rounds) - 1)
    summary = ov.round(which) or rounds[-1]
    st.markdown(f"**Held-out environments** · win rate {fmt(summary.heldout_win_rate)}")
    results = data.heldout_results(which)
    if results:
        table = pd.DataFrame(results, columns=HELDOUT_COLUMNS)
        st.dataframe(table, hide_index=True, width="stretch")
    else:
        st.caption("No held-out environment files were played (run.heldout_envs).")
    suites = summary.heldout_suites
    if not suites:
        st.caption("No held-out suites were played in this round (run.heldout_suites).")
        return
    st.markdown("**Held-out suites** (mean item score)")
    for col, (name, s) in zip(st.columns(len(suites)), suites.items(), strict=True):
        col.metric(name, fmt(s.get("score")))
        col.caption(f"{s.get('tasks')} tasks · {s.get('failed_plays')} failed plays")
    suite = st.radio("Suite", list(suites), horizontal=True)
    rows = [
        {k: i.get(k) for k in ITEM_COLUMNS} | {"failure": failure_text(i.get("failure"))}
        for i in data.heldout_items(which)
        if i.get("suite") == suite
    ]
    st.dataframe(pd.DataFrame(rows, columns=ITEM_COLUMNS), hide_index=True, width="stretch")
    if not rows:
        return
    by_task = {str(r["task_id"]): r for r in rows}
    task = st.selectbox(
        "Transcript of task",
        list(by_task),
        format_func=lambda t: f"{t} · score {fmt(by_task[t]['score'])} · {by_task[t]['status']}",
    )
    messages = data.heldout_transcripts(which, suite).get(task)
    if messages:
        chat(st.container(), messages)
    else:
        st.caption("no transcript stored for this task")


# -- memory ------------------------------------------------------------------------------------


@st.fragment
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
