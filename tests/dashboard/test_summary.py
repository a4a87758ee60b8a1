"""The dashboard's round summary: attempts that failed on our side are not designs."""

from __future__ import annotations

import json

from spade.dashboard.summary import summarize


def test_failed_attempts_are_left_out_of_the_acceptance_counts():
    rows = [
        {"source": "designed", "accepted": True, "failure": None, "win_rate": 0.5, "reward": 1.0},
        {"source": "designed", "accepted": False, "failure": "parse", "reward": -1.0},
        {"source": "designed", "accepted": False, "failed": True, "failure": "inference",
         "reward": None},
        {"source": "designed", "accepted": False, "failure": "inference", "reward": -1.0},  # old
    ]  # fmt: skip
    scored = "".join(json.dumps(r) + "\n" for r in rows).encode()
    summary = summarize(0, {}, {"scored": scored})
    assert (summary.attempts, summary.accepted, summary.acceptance_rate) == (2, 1, 0.5)
    assert summary.rejections == {"parse": 1} and summary.designer_reward == 0.0
