"""``spade status`` on a campaign whose numbers are as wide as they get: through a pipe (80
columns) the table is whole, and a round that trained no role says why."""

from __future__ import annotations

import json

from spade.cli.progress import CampaignProgress
from spade.config import load_config
from spade.pipeline.campaign import ensure_campaign, record_target
from spade.pipeline.context import RoundContext
from spade.pipeline.record import StageRecord, campaign_store, jsonl
from spade.storage import STAGES
from tests.cli.test_run_cli import spade


def _round(cfg, r: int, *, complete: bool) -> None:
    cs = StageRecord(RoundContext.open(cfg, "wide", r), "score").cs
    designs = [
        {"source": "designed", "accepted": i % 2 == 0, "failure": None if i % 2 == 0 else
         "duplicate", "win_rate": 0.625, "hinted_win_rate": 0.875, "regret": 0.25,
         "mean_return": 0.75 if i % 2 == 0 else None,
         "reward": -1.25 + i / 10, "raw_reward": -1.0, "novel": i % 2 == 0,
         "repaired": i % 4 == 0}
        for i in range(24)
    ]  # fmt: skip
    pool = [{"source": "pool", "accepted": True, "failure": None, "win_rate": 0.25,
             "hinted_win_rate": 0.5, "regret": 0.375, "reward": None,
             "mean_return": 0.5}] * 12  # fmt: skip
    cs.store.write_bytes(cs.layout.stage_key(r, "score", "scored.jsonl"), jsonl(designs + pool))
    cs.store.write_json(  # the incomplete round replays the other: the replay column shows
        cs.layout.stage_key(r, "sample_documents", "plan.json"),
        {"regeneration": r, "replay_of": None if complete else r - 1},
    )
    cs.store.write_json(
        cs.layout.stage_key(r, "train_agent", "outcome.json"),
        {"skipped": "every advantage is zero (equal rewards within each group)"},
    )
    cs.store.write_json(
        cs.layout.stage_key(r, "train_designer", "outcome.json"), {"metrics": {"loss": -12.3456}}
    )
    cs.store.write_json(
        cs.layout.stage_key(r, "publish", "weights.json"), {"version": f"r{r:04d}-designer"}
    )
    heldout = {"win_rate": 0.333, "win_rate_interval": [0.1234, 0.9876], "mean_return": 0.5,
               "mean_return_interval": [0.25, 0.75], "plays": 1024}  # fmt: skip
    base = heldout | {"mean_return": 0.125}  # round 0's held-out plays of the base weights
    cs.store.write_json(
        cs.layout.stage_key(r, "heldout", "summary.json"),
        heldout | ({"base": base} if r == 118 else {}),
    )
    for stage in STAGES if complete else STAGES[:3]:
        StageRecord(RoundContext.open(cfg, "wide", r), stage).commit()


def test_status_fits_80_columns_and_says_why_a_role_did_not_train(tmp_path):
    cfg = load_config(overrides={"storage.root": str(tmp_path / "store")})
    ensure_campaign(campaign_store(cfg, "wide"), cfg)
    record_target(campaign_store(cfg, "wide"), 0)  # started with --rounds 0: until stopped
    _round(cfg, 118, complete=True)
    _round(cfg, 119, complete=False)
    done = spade("status", "wide", "--store", str(tmp_path / "store"), home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "…" not in done.stdout
    table = lines[: next(i for i, line in enumerate(lines) if line.startswith("rnd:"))]
    assert max(len(line.rstrip()) for line in lines if not line.startswith(("round ", "art"))) <= 80
    (row,) = [line.split() for line in table if line.strip().startswith("118 ")]
    # rnd re-of design ok nov dup pool win ret hint regret sprd loss-agent loss-dsgn held wts
    # (repairs: --json); win (12 x 0.625 + 12 x 0.25) / 24; ret (12 x 0.75 + 12 x 0.5) / 24
    # (the played only); hint (0.875 + 0.5) / 2; regret (0.25 + 0.375) / 2; spread
    # (-1.25 + 2.3) - (-1.25); a loss from 10 up with one decimal
    assert row == [
        "118", "-", "24", "12", "12", "12", "12", "0.44", "0.62", "0.69", "0.31", "2.30",
        "-", "-12.3", "0.33", "r118d",
    ]  # fmt: skip
    assert any(line.strip().startswith("119*") for line in table)  # not complete
    assert "round 118: agent not trained: every advantage is zero" in done.stdout
    assert "target: until stopped" in lines  # what a resume continues to
    held = lines[lines.index("held-out, base weights (1024 plays, 95% intervals):") :]
    assert held[1] == "  mean return 0.12 [0.25, 0.75], win rate 0.33 [0.12, 0.99]"
    assert held[2].startswith("held-out, after round 119 (r119d)")
    info = json.loads(
        spade("status", "wide", "--store", str(tmp_path / "store"), "--json", home=tmp_path).stdout
    )
    assert info["rounds"][0]["pool_envs"] == 12 and info["rounds"][0]["designer_loss"] == -12.3456


def test_a_small_reward_spread_is_not_shown_as_none():
    from spade.cli.campaign import cell

    assert cell("designer_spread", {"designer_spread": 0.0004}) == "<.01"
    assert cell("designer_spread", {"designer_spread": 0.0}) == "0.00"
    assert cell("designer_spread", {"designer_spread": 0.17}) == "0.17"
    assert cell("regret", {"regret": 0.0004}) == "0.00"


def test_a_damaged_store_is_one_clear_error_and_the_live_view_keeps_going(tmp_path):
    cfg = load_config(overrides={"storage.root": str(tmp_path / "store")})
    ensure_campaign(campaign_store(cfg, "wide"), cfg)
    record_target(campaign_store(cfg, "wide"), 0)  # started with --rounds 0: until stopped
    _round(cfg, 0, complete=True)
    _round(cfg, 1, complete=True)
    cs = StageRecord(RoundContext.open(cfg, "wide", 1), "score").cs
    view = CampaignProgress(cs, rounds=2)
    assert [row["round"] for row in view.poll()] == [0, 1]
    cs.store.write_bytes(cs.layout.stage_key(1, "score", "scored.jsonl"), b'{"source": "des')
    view._complete.pop(1)  # as if round 1 had not been seen complete before the damage
    view._polled = 0.0
    rows = view.poll()  # the damaged round keeps its last row; nothing raises
    assert [row["round"] for row in rows] == [0, 1]

    done = spade("status", "wide", "--store", str(tmp_path / "store"), home=tmp_path / "home")
    assert done.returncode == 2
    assert "round-0001/score/scored.jsonl line 1 is not JSON" in done.stdout
    assert "spade resume wide" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
