"""Helpers for driving dashboards/app.py under Streamlit's AppTest: run it on a store, open a
tab (only the open tab runs), and decode the Vega-Lite charts' data."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from streamlit.testing.v1 import AppTest

from tests.integration.prefect_live import REPO_ROOT

APP = str(REPO_ROOT / "dashboards" / "app.py")


def run_app(monkeypatch, root: str, campaign: str | None, tab: str | None = None) -> AppTest:
    monkeypatch.setenv("SPADE_DASHBOARD_STORE", root)
    if campaign:
        monkeypatch.setenv("SPADE_DASHBOARD_CAMPAIGN", campaign)
    else:
        monkeypatch.delenv("SPADE_DASHBOARD_CAMPAIGN", raising=False)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    return open_tab(at, tab) if tab else at


def open_tab(at: AppTest, tab: str) -> AppTest:
    """Switch to ``tab`` (the tabs are keyed "tab"; a switch reruns the app)."""
    at.session_state["tab"] = tab
    at.run()
    assert not at.exception, at.exception
    return at


def charts(at: AppTest) -> list[dict[str, dict[Any, float]]]:
    """Every Vega-Lite chart as {series: {x: value}}: each chart's one dataset is an Arrow
    table of (x, series, value) columns (spade.dashboard.charts)."""
    out = []
    for el in at.get("vega_lite_chart"):
        (dataset,) = el.proto.datasets
        df = pa.ipc.open_stream(dataset.data.data).read_pandas()
        assert list(df.columns)[1:] == ["series", "value"], df.columns
        found: dict[str, dict[Any, float]] = {}
        for x, series, value in df.itertuples(index=False):
            found.setdefault(series, {})[x] = value
        out.append(found)
    return out


def chart_with(all_charts, *series):
    return next(c for c in all_charts if set(series) <= set(c))


def by_label(widgets, label):
    return next(w for w in widgets if w.label == label)
