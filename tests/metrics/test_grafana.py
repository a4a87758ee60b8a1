"""The Grafana dashboards under infra/grafana: valid, provisioned, and querying only series that
exist — SPADE's checked against a real scrape of the exporter, vLLM's against vLLM's own list."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from spade.metrics import prom
from tests.metrics.readers import sample_names, scrape

GRAFANA = Path(__file__).resolve().parents[2] / "infra" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))

# The series vLLM exports on /metrics (V1 engine, v0.10 / v0.11 — the compose image is
# vllm/vllm-openai:v0.11.0): `PrometheusStatLogger` in vllm/v1/metrics/loggers.py, listed in
# https://docs.vllm.ai/en/stable/usage/metrics/ ("Production Metrics"). Counters are exposed
# with `_total`, histograms as `_bucket` / `_sum` / `_count`.
VLLM_GAUGES = {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"}
VLLM_COUNTERS = {
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:num_preemptions",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
}
VLLM_HISTOGRAMS = {
    "vllm:time_to_first_token_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
}
VLLM_SERIES = (
    VLLM_GAUGES
    | {f"{c}_total" for c in VLLM_COUNTERS}
    | {f"{h}{s}" for h in VLLM_HISTOGRAMS for s in ("_bucket", "_sum", "_count")}
)

METRIC = re.compile(r"(?<![\w:])(spade_[a-z0-9_]+|vllm:[a-z0-9_:]+)")


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # panels inside collapsed rows
    return out


def _queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", [])]
    variables = dashboard.get("templating", {}).get("list", [])
    exprs += [v["definition"] for v in variables if v.get("type") == "query"]
    return exprs


def _metric_names(dashboard: dict[str, Any]) -> set[str]:
    return {m for q in _queries(dashboard) for m in METRIC.findall(q)}


def test_two_dashboards_ship():
    titles = {_load(p)["title"] for p in DASHBOARDS}
    assert titles == {"SPADE sandbox", "vLLM"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_valid_json_with_panels_and_queries(path):
    dashboard = _load(path)
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    panels = _panels(dashboard)
    assert len(panels) >= 4
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    uids = {_load(p)["uid"] for p in DASHBOARDS}
    assert len(uids) == len(DASHBOARDS), "dashboard uids must be unique"
    for panel in panels:
        assert panel["title"] and panel["type"] in {"timeseries", "stat", "bargauge", "gauge"}
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24
        assert panel["targets"], f"{panel['title']}: no query"
        for target in panel["targets"]:
            # the data source is the dashboard's variable: it imports into any Grafana
            assert target["datasource"]["uid"] == "${datasource}"
            _check_promql(target["expr"])
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"


def _check_promql(expr: str) -> None:
    """What can go wrong in hand-written PromQL short of a parser: unbalanced brackets, and a
    quantile over something that is not a histogram's buckets summed by ``le``."""
    depth = {"(": 0, "{": 0, "[": 0}
    closing = {")": "(", "}": "{", "]": "["}
    for ch in re.sub(r'"[^"]*"', '""', expr):
        if ch in depth:
            depth[ch] += 1
        elif ch in closing:
            depth[closing[ch]] -= 1
            assert depth[closing[ch]] >= 0, expr
    assert all(d == 0 for d in depth.values()), expr
    for match in re.finditer(r"histogram_quantile\(\s*0?\.\d+\s*,\s*sum by \(([^)]*)\)", expr):
        assert "le" in {x.strip() for x in match.group(1).split(",")}, expr
    if "histogram_quantile" in expr:
        assert "_bucket" in expr, expr


def test_sandbox_dashboard_queries_only_what_the_exporter_exposes(metrics_port):
    # one sample of every metric, through the functions the sandbox session calls, so every
    # labelled series exists in the scrape
    prom.record_session_launch()
    prom.record_session_loaded(0.05)
    prom.record_call("step", 0.001)
    prom.record_failure("crash")
    exposed = sample_names(scrape(metrics_port))
    used = _metric_names(_load(GRAFANA / "dashboards" / "spade-sandbox.json"))
    assert used, "the sandbox dashboard queries nothing"
    assert used <= exposed, f"not exposed by spade.metrics.prom: {sorted(used - exposed)}"
    # and it shows all of it: starts, calls, failures, both latency histograms
    assert {
        "spade_sandbox_session_starts_total",
        "spade_sandbox_calls_total",
        "spade_sandbox_failures_total",
        "spade_sandbox_call_seconds_bucket",
        "spade_sandbox_session_start_seconds_bucket",
    } <= used


def test_vllm_dashboard_uses_vllm_names():
    used = _metric_names(_load(GRAFANA / "dashboards" / "vllm.json"))
    assert used and all(m.startswith("vllm:") for m in used)
    assert used <= VLLM_SERIES, f"not in vLLM's list: {sorted(used - VLLM_SERIES)}"
    # what the issue asks the dashboard to show
    assert {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:kv_cache_usage_perc",
    } <= used


def test_provisioning_points_at_the_compose_prometheus_and_the_dashboards():
    source = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yaml").read_text())
    (ds,) = source["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/spade.yaml").read_text())
    (p,) = provider["providers"]
    assert p["type"] == "file"
    compose = yaml.safe_load((GRAFANA.parent / "compose.yaml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./grafana/dashboards:{p['options']['path']}:ro" in mounts
    assert "./grafana/provisioning:/etc/grafana/provisioning:ro" in mounts


def test_prometheus_scrapes_vllm_and_the_workers_on_the_exporters_port():
    config = yaml.safe_load((GRAFANA / "prometheus.yaml").read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    targets = {
        name: {t for sc in j["static_configs"] for t in sc["targets"]} for name, j in jobs.items()
    }
    assert targets["vllm"] == {"vllm:8000"} and jobs["vllm"]["metrics_path"] == "/metrics"
    assert targets["spade-sandbox"] == {"cpu-worker:9400", "gpu-worker:9400"}
    services = yaml.safe_load((GRAFANA.parent / "compose.yaml").read_text())["services"]
    assert {"vllm", "cpu-worker", "gpu-worker"} <= set(services)
    # the multi-process override runs the exporter on that same port in both workers
    override = yaml.safe_load((GRAFANA / "compose.multiproc.yaml").read_text())["services"]
    assert set(override) == {"cpu-worker", "gpu-worker"}
    for name, service in override.items():
        folder = service["environment"]["PROMETHEUS_MULTIPROC_DIR"]
        assert folder in service["tmpfs"]  # empty at each start, as multi-process mode needs
        script = service["command"][-1]
        assert "python -m spade.metrics.prom --port 9400 &" in script
        pool = "spade-cpu" if name == "cpu-worker" else "spade-gpu"
        # the worker itself is started as in compose.yaml
        base = " ".join(services[name]["command"])
        assert script.split("& exec ", 1)[1] == base and f"--pool {pool}" in base
