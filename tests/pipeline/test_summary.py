"""A round's summary row from its committed files."""

from __future__ import annotations

from spade.config import load_config
from spade.pipeline.record import campaign_store, jsonl
from spade.pipeline.summary import round_summary


def test_environments_without_hinted_plays_do_not_break_the_means(tmp_path):
    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    rows = [
        {"accepted": True, "failure": None, "win_rate": 0.5, "hinted_win_rate": None,
         "regret": 0.0, "reward": 0.25},
        {"accepted": True, "failure": None, "win_rate": 0.25, "hinted_win_rate": 1.0,
         "regret": 0.75, "reward": -0.25},
        {"accepted": False, "failure": "parse", "win_rate": None, "hinted_win_rate": None,
         "regret": None, "reward": 0.0},
    ]  # fmt: skip
    cs.store.write_bytes(cs.layout.stage_key(0, "score", "scored.jsonl"), jsonl(rows))
    row = round_summary(cfg, "c", 0)
    assert (row["attempts"], row["accepted"], row["rejections"]) == (3, 2, {"parse": 1})
    assert row["win_rate"] == 0.375 and row["hinted_win_rate"] == 1.0  # the one measured
    assert row["regret"] == 0.375 and row["designer_reward"] == 0.0
    assert row["replay_of"] is None and row["complete"] is False
