"""spade.dashboard.charts: plain Vega-Lite dicts with one Arrow table of (x, series, value)."""

from __future__ import annotations

import json

from spade.dashboard import charts


def rows(spec: charts.Spec) -> list[dict]:
    return spec["datasets"][charts.DATASET].to_pylist()


def test_lines_leave_out_missing_values_and_keep_series_order():
    table = charts.per_round(
        {0: {"hinted": 0.5, "held-out": None}, 1: {"hinted": 1.0, "held-out": 0.25}},
        rename={"hinted": "hinted (mean)"},
    )
    spec = charts.lines(table, unit_range=True)
    assert rows(spec) == [
        {"round": 0, "series": "hinted (mean)", "value": 0.5},
        {"round": 1, "series": "hinted (mean)", "value": 1.0},
        {"round": 1, "series": "held-out", "value": 0.25},
    ]
    enc = spec["encoding"]
    assert enc["y"]["scale"] == {"domain": [0, 1]} and spec["mark"]["point"] is True
    assert enc["color"]["sort"] == ["hinted (mean)", "held-out"]
    json.dumps({k: v for k, v in spec.items() if k != "datasets"})  # the rest is plain JSON
    assert enc["y"]["axis"] == {"format": "~g"}  # 0.0002 reads 0.0002, not 0.000000
    assert "strokeDash" not in enc


def test_series_named_like_dashed_are_drawn_dashed():
    table = charts.per_round({0: {"unhinted win": 0.0, "unhinted return": 0.4}})
    enc = charts.lines(table, dashed="return")["encoding"]
    dash = enc["strokeDash"]
    assert dash["condition"]["test"] == "indexof(datum.series, 'return') >= 0"
    assert dash["condition"]["value"] == [4, 3] and dash["value"] == [1, 0]


def test_stacked_bars_fill_gaps_with_zero_and_turn_to_areas_when_dense():
    few = charts.stacked_bars(charts.per_round({0: {"crash": 2}, 1: {"parse": 1}}))
    assert few["mark"]["type"] == "bar"
    assert {(r["round"], r["series"]): r["value"] for r in rows(few)} == {
        (0, "crash"): 2.0, (1, "parse"): 1.0, (0, "parse"): 0.0, (1, "crash"): 0.0,
    }  # fmt: skip
    many = {r: {"evaluate": 1.0} for r in range(charts.DENSE_ROUNDS + 1)}
    dense = charts.stacked_bars(charts.per_round(many))
    assert dense["mark"]["type"] == "area" and len(rows(dense)) == charts.DENSE_ROUNDS + 1
    line = charts.lines(charts.per_round(many))
    assert line["mark"]["point"] is False


def test_horizontal_bars_one_band_per_category():
    spec = charts.horizontal_bars({"feasibility": 3, "parse": 1}, "check", "designs")
    assert rows(spec) == [
        {"check": "feasibility", "series": "designs", "value": 3.0},
        {"check": "parse", "series": "designs", "value": 1.0},
    ]
    assert spec["height"] == {"step": 28} and spec["encoding"]["y"]["sort"] == "-x"
