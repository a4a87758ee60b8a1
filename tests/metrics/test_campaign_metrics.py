"""The campaign flow's hooks: after a real (scripted) round, its summary and its tables (designs,
a sample of rollouts) are in W&B (offline) and TensorBoard at step 0, and the flow's process
serves the sandbox metrics of that round."""

from __future__ import annotations

import asyncio

import pytest

from flows.campaign import campaign_flow
from spade.config import load_config
from spade.metrics import prom
from spade.metrics.sinks import round_metrics
from spade.metrics.tables import DESIGN_COLUMNS
from spade.processes import free_port
from tests.metrics.readers import scrape, text_tables, value

pytestmark = pytest.mark.sandbox


def test_a_round_reaches_the_sinks_and_the_exporter(
    prefect_api, scripted_overrides, tmp_path, wandb_offline
):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # the flow starts the endpoint (or finds this process already serving one)
    port = prom.served_port() or free_port()
    cfg = load_config(
        overrides={
            **scripted_overrides,
            "name": "metricsflow",
            "storage.root": str(tmp_path / "store"),
            "run.train": False,
            "metrics.wandb": True,
            "metrics.wandb_project": "spade-flow-test",
            "metrics.tensorboard_dir": str(tmp_path / "tb"),
            "metrics.prometheus_port": port,
            "metrics.rollout_samples": 4,
        }
    )
    # nothing may be served yet if this test runs first: count from zero then
    before = scrape(port) if prom.served_port() else {}
    status = asyncio.run(campaign_flow(config=cfg, campaign_id="metrics-flow", rounds=1))
    (row,) = status["rounds"]
    assert row["complete"] and row["accepted"] == 3
    expected = round_metrics(row)
    assert {"accepted", "win_rate", "regret", "stage_seconds/verify"} <= set(expected)

    acc = EventAccumulator(str(tmp_path / "tb" / "metrics-flow"))
    acc.Reload()
    for tag in ("accepted", "win_rate", "regret", "stage_seconds/verify"):
        (event,) = acc.Scalars(tag)
        assert event.step == 0 and event.value == pytest.approx(expected[tag], rel=1e-6)

    (run,) = wandb_offline()
    assert run.run_id == "metrics-flow" and run.project == "spade-flow-test"
    assert {k: run.history[0][k] for k in expected} == pytest.approx(expected)

    # the round's designs (code, verdict) and 4 of its plays, read from the store
    designs = run.table(0, "designs")
    assert len(designs) == row["attempts"]
    accepted = [d for d in designs if d["verdict"] == "accepted"]
    assert len(accepted) == 3 and all(d["code"] and d["win_rate"] is not None for d in accepted)
    rollouts = run.table(0, "rollouts")
    assert len(rollouts) == 4 and all(r["transcript"].startswith("[start]") for r in rollouts)
    (tb_designs,) = text_tables(tmp_path / "tb" / "metrics-flow", "designs").values()
    assert tb_designs[0] == [f"**{c}**" for c in DESIGN_COLUMNS]
    assert len(tb_designs) == 1 + row["attempts"]

    # the round's verify and evaluate stages ran jailed sessions in this process
    assert prom.served_port() == port
    after = scrape(port)
    assert value(after, "spade_sandbox_session_starts_total") > value(
        before, "spade_sandbox_session_starts_total"
    )
    assert value(after, "spade_sandbox_calls_total", op="step") > value(
        before, "spade_sandbox_calls_total", op="step"
    )
