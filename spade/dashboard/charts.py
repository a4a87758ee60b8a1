"""Vega-Lite specs for the dashboard's charts, as plain dicts (no Altair, no Streamlit).

``dashboards/app.py`` hands them to ``st.vega_lite_chart``. Building the dicts here instead of
through Altair skips Altair's JSON-schema validation of every chart on every script run, which
was most of a page load (about 0.2 s a chart on two cores, a dozen charts a page). Each chart's
data is one Arrow table in the spec's ``datasets`` in long form, ``(x, series, value)``, which
Streamlit sends as is (no pandas conversion) and the tests decode the same way for every chart.
Missing values (a stage not committed, a suite not configured that round) are left out, so a
line joins the points it has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

Spec = dict[str, Any]
DATASET = "table"
DENSE_ROUNDS = 40
"""Above this many rounds, lines are drawn without a point per round and stacked bars as
stacked areas: what the browser draws then stays a few paths per chart instead of growing by
a mark per round and series (thousands for a long campaign, seconds of drawing on two cores)."""


def long_table(x: str, points: Iterable[tuple[Any, str, float | int | None]]) -> pa.Table:
    """An Arrow table ``(x, series, value)`` of the points whose value is present."""
    xs, series, values = [], [], []
    for at, name, value in points:
        if value is None or value != value:  # None or NaN: not drawn
            continue
        xs.append(at)
        series.append(name)
        values.append(float(value))
    kind = pa.int64() if all(isinstance(v, int) for v in xs) else pa.string()
    return pa.table(
        {
            x: pa.array(xs if kind == pa.int64() else [str(v) for v in xs], kind),
            "series": pa.array(series, pa.string()),
            "value": pa.array(values, pa.float64()),
        }
    )


def per_round(
    rows: Mapping[int, Mapping[str, float | int | None]], rename: Mapping[str, str] | None = None
) -> pa.Table:
    """``{round: {series: value}}`` in long form (series renamed by ``rename`` where given)."""
    rename = rename or {}
    return long_table(
        "round",
        ((rnd, rename.get(k, k), v) for rnd, values in rows.items() for k, v in values.items()),
    )


def _base(table: pa.Table, height: int) -> Spec:
    return {
        "datasets": {DATASET: table},
        "data": {"name": DATASET},
        "height": height,
        "config": {"legend": {"orient": "bottom", "title": None}},
    }


def _color(table: pa.Table) -> Spec:
    """One colour per series, in the order they first appear (not alphabetical)."""
    order = list(dict.fromkeys(table.column("series").to_pylist()))
    return {"field": "series", "type": "nominal", "title": None, "sort": order}


def _rounds(table: pa.Table) -> int:
    return len(set(table.column("round").to_pylist())) if "round" in table.column_names else 0


def _round_axis() -> Spec:
    """The x encoding of every per-round chart: whole rounds."""
    return {
        "field": "round",
        "type": "quantitative",
        "title": None,
        "axis": {"tickMinStep": 1, "format": "d"},
    }


def lines(
    table: pa.Table, *, unit_range: bool = False, height: int = 220, dashed: str | None = None
) -> Spec:
    """Lines over rounds, one per series, points marked (up to :data:`DENSE_ROUNDS` rounds);
    ``unit_range``: a fixed 0..1 axis (a rate that stays flat then looks flat); ``dashed``:
    series whose name contains it are drawn dashed (returns beside the win rates). The value
    axis is labelled in d3's trimmed general format (``~g``): a KL of 2e-4 reads ``0.0002``,
    not ``0.000000``."""
    y: Spec = {"field": "value", "type": "quantitative", "title": None, "axis": {"format": "~g"}}
    if unit_range:
        y["scale"] = {"domain": [0, 1]}
    encoding: Spec = {"x": _round_axis(), "y": y, "color": _color(table)}
    if dashed is not None:
        encoding["strokeDash"] = {
            "condition": {"test": f"indexof(datum.series, '{dashed}') >= 0", "value": [4, 3]},
            "value": [1, 0],
        }
    return _base(table, height) | {
        "mark": {"type": "line", "point": _rounds(table) <= DENSE_ROUNDS, "tooltip": True},
        "encoding": encoding,
    }


def _zero_filled(table: pa.Table) -> pa.Table:
    """Every (round, series) pair, 0 where absent: a stack counts a missing series as none
    (an area would otherwise join the rounds either side of the gap)."""
    rows = table.to_pylist()
    have = {(r["round"], r["series"]) for r in rows}
    rounds = sorted({r["round"] for r in rows})
    names = list(dict.fromkeys(r["series"] for r in rows))
    zeros = [(x, n, 0) for x in rounds for n in names if (x, n) not in have]
    if not zeros:
        return table
    return long_table("round", [*((r["round"], r["series"], r["value"]) for r in rows), *zeros])


def stacked_bars(table: pa.Table, *, height: int = 220) -> Spec:
    """Bars over rounds, the series stacked (a stacked area above :data:`DENSE_ROUNDS`)."""
    table = _zero_filled(table)
    if _rounds(table) > DENSE_ROUNDS:
        return _base(table, height) | {
            "mark": {"type": "area", "tooltip": True, "interpolate": "step-after"},
            "encoding": {
                "x": _round_axis(),
                "y": {"field": "value", "type": "quantitative", "stack": "zero", "title": None},
                "color": _color(table),
            },
        }
    return _base(table, height) | {
        "mark": {"type": "bar", "tooltip": True},
        "encoding": {
            "x": {
                "field": "round",
                "type": "ordinal",
                "title": None,
                "axis": {"labelAngle": 0, "labelOverlap": True},
            },
            "y": {"field": "value", "type": "quantitative", "stack": "zero", "title": None},
            "color": _color(table),
        },
    }


def horizontal_bars(counts: Mapping[str, int], category: str, series: str) -> Spec:
    """One bar per category (largest first), e.g. rejected designs per verifier check."""
    table = long_table(category, ((k, series, n) for k, n in counts.items()))
    spec = _base(table, 0) | {
        "mark": {"type": "bar", "tooltip": True},
        "encoding": {
            "y": {"field": category, "type": "nominal", "sort": "-x", "title": None},
            "x": {
                "field": "value",
                "type": "quantitative",
                "title": series,
                "axis": {"tickMinStep": 1, "format": "d"},
            },
        },
    }
    spec["height"] = {"step": 28}  # a band per category: the chart grows with them
    return spec
