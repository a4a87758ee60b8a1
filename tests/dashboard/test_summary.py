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


def test_the_paired_regret_is_read_from_the_evaluations_and_absent_from_older_rounds():
    rows = [{"env_id": "a", "paired_regret": 0.5}, {"env_id": "b", "paired_regret": 0.25}]
    evaluations = "".join(json.dumps(r) + "\n" for r in rows).encode()
    assert summarize(1, {}, {"evaluations": evaluations}).row()["paired_regret"] == 0.375
    older = b'{"env_id": "a", "regret": 0.5}\n'  # stored before plays were paired
    assert summarize(0, {}, {"evaluations": older}).paired_regret is None
