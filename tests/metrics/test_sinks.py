"""The W&B and TensorBoard sinks, read back from what they wrote (no network: W&B offline)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from spade.config import load_config
from spade.metrics.sinks import configured_sinks, log_round, markdown_cell, round_metrics
from spade.metrics.tables import (
    DESIGN_COLUMNS,
    ROLLOUT_COLUMNS,
    RoundTables,
    design_rows,
    rollout_row,
)
from spade.pipeline.record import campaign_store
from spade.pipeline.summary import SUMMARY_COLUMNS, summarize_round
from tests.metrics.readers import text_tables

CID = "metrics-camp-20260101-000000-abcd"


def _row(round: int, **more: object) -> dict[str, object]:
    """A summary row shaped like ``spade.pipeline.summary.summarize_round``'s."""
    return {
        "round": round,
        "stages_done": 13,
        "stages_total": 13,
        "complete": True,
        "replay_of": None,
        "attempts": 5,
        "accepted": 3,
        "novel": 3,
        "duplicates": 0,
        "repaired": 1,
        "pool_envs": 1,
        "rejections": {"infeasible": 1, "parse": 1},
        "win_rate": 0.25 + round / 10,
        "mean_return": 0.375 + round / 10,
        "hinted_win_rate": 0.5,
        "regret": 0.125,
        "designed_win_rate": 0.25,
        "designed_regret": 0.125,
        "designer_reward": -0.0625,
        "designer_spread": 0.75,
        "designed_episodes": 24,
        "pool_episodes": 8,
        "train_loss": None,  # training skipped: no number, not a zero
        "agent_skipped": "every advantage is zero (equal rewards within each group)",
        "designer_loss": 0.5,
        "designer_skipped": None,
        "heldout_win_rate": 0.75,
        "heldout_suites": {},
        "weights": f"r{round:04d}-designer",
        "stage_seconds": {"design": 1.5, "verify": 2.25},
        **more,
    }


def _cfg(tmp_path: Path, **overrides: object):
    return load_config(overrides={"storage.root": str(tmp_path / "store"), **overrides})


def _write_heldout(cfg, round: int, suites: dict[str, dict[str, float]]) -> None:
    cs = campaign_store(cfg, CID)
    key = cs.layout.stage_key(round, "heldout", "summary.json")
    cs.store.write_json(key, {"win_rate": 0.75, "suites": suites})


def test_round_metrics_keep_every_numeric_column_and_the_suites():
    metrics = round_metrics(_row(2, heldout_suites={"humaneval": {"score": 0.4, "tasks": 10}}))
    numeric = {
        c
        for c in SUMMARY_COLUMNS
        if c not in ("round", "replay_of") and isinstance(_row(2)[c], float | int)
    }
    assert numeric <= set(metrics)
    assert metrics["win_rate"] == pytest.approx(0.45)
    assert metrics["stage_seconds/verify"] == 2.25 and metrics["rejections/parse"] == 1.0
    assert metrics["heldout/humaneval/score"] == 0.4 and metrics["heldout/humaneval/tasks"] == 10
    # the step, text, flags and missing numbers are not metrics
    assert not {"round", "weights", "complete", "train_loss"} & set(metrics)
    assert "replay_of" not in round_metrics(_row(2, replay_of=1))  # a round index, not a metric


def test_no_sink_configured_is_a_no_op(tmp_path):
    cfg = _cfg(tmp_path)
    assert configured_sinks(cfg) == []
    assert log_round(cfg, CID, 0, _row(0)) == []
    assert not (tmp_path / "store").exists()  # not even the store is read


def test_wandb_offline_one_run_per_campaign_resumed_by_id(tmp_path, wandb_offline):
    cfg = _cfg(tmp_path, **{"metrics.wandb": True, "metrics.wandb_project": "spade-test"})
    suites = {"reasoning_gym": {"score": 0.3}, "humaneval": {"score": 0.6}}
    assert log_round(cfg, CID, 0, _row(0)) == []
    assert log_round(cfg, CID, 1, _row(1, heldout_suites=suites)) == []
    runs = wandb_offline()
    # each round opened the run again with the campaign id: one folder per round, one run id,
    # which `wandb sync` uploads as one run
    assert len(runs) == 2
    assert {r.run_id for r in runs} == {CID} and {r.project for r in runs} == {"spade-test"}
    history = {step: row for r in runs for step, row in r.history.items()}
    assert sorted(history) == [0, 1]
    assert history[0]["win_rate"] == 0.25 and history[1]["win_rate"] == pytest.approx(0.35)
    assert history[0]["stage_seconds/design"] == 1.5 and history[1]["accepted"] == 3
    assert history[1]["heldout/reasoning_gym/score"] == 0.3
    assert history[1]["heldout/humaneval/score"] == 0.6
    assert "heldout/humaneval/score" not in history[0]  # round 0 had no held-out suites


def test_tensorboard_scalars_per_step(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = _cfg(tmp_path, **{"metrics.tensorboard_dir": str(tmp_path / "tb")})
    suites = {"bfcl_multi_turn": {"score": 0.5, "tasks": 4}}
    assert log_round(cfg, CID, 0, _row(0)) == []
    assert log_round(cfg, CID, 1, _row(1, heldout_suites=suites)) == []
    acc = EventAccumulator(str(tmp_path / "tb" / CID))  # one folder per campaign
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"win_rate", "regret", "stage_seconds/design", "heldout/bfcl_multi_turn/score"} <= tags

    def series(tag: str) -> list[tuple[int, float]]:
        return [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)]

    assert series("win_rate") == [(0, 0.25), (1, 0.35)]
    assert series("accepted") == [(0, 3.0), (1, 3.0)]
    assert series("heldout/bfcl_multi_turn/score") == [(1, 0.5)]


def test_a_failing_sink_only_warns_and_the_others_still_write(tmp_path, wandb_offline, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the TensorBoard folder should go")
    cfg = _cfg(tmp_path, **{"metrics.wandb": True, "metrics.tensorboard_dir": str(blocker)})
    with caplog.at_level(logging.WARNING, logger="spade.metrics.sinks"):
        problems = log_round(cfg, CID, 0, _row(0))
    assert len(problems) == 1 and "tensorboard" in problems[0]
    assert "Not a directory" in problems[0]  # the reason, not just "failed"
    assert any("tensorboard" in r.getMessage() for r in caplog.records)
    assert wandb_offline()[0].history[0]["win_rate"] == 0.25  # W&B still got round 0


def test_a_sink_that_raises_while_logging_only_warns(tmp_path, monkeypatch):
    from spade.metrics import sinks

    def broken_log(self, metrics, step):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(sinks.TensorBoardSink, "log", broken_log)
    cfg = _cfg(tmp_path, **{"metrics.tensorboard_dir": str(tmp_path / "tb")})
    warnings: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logger = logging.getLogger("test-metrics-run-logger")
    logger.addHandler(Collect())
    problems = log_round(cfg, CID, 3, _row(3), logger=logger)
    assert problems == [
        "metrics: tensorboard sink did not record round 3: RuntimeError('disk on fire')"
    ]
    assert warnings and "disk on fire" in warnings[0]  # on the logger given (the flow's)


def test_log_round_takes_round_summary_as_it_is(tmp_path):
    """The row the campaign flow passes (``summarize_round``) of a round the store barely has:
    the held-out suites come from the store through the summary."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = _cfg(tmp_path, **{"metrics.tensorboard_dir": str(tmp_path / "tb")})
    _write_heldout(cfg, 0, {"humaneval": {"score": 0.25}})
    row = summarize_round(campaign_store(cfg, CID), 0)
    assert log_round(cfg, CID, 0, row) == []
    acc = EventAccumulator(str(tmp_path / "tb" / CID))
    acc.Reload()
    assert {"attempts", "stages_done", "heldout/humaneval/score"} <= set(acc.Tags()["scalars"])


# ---- the round's tables: designs and a sample of rollouts -----------------------------------

CODE = 'class Doors(TextEnv):\n    """Pick a door."""\n\n    def step(self, action):\n        return "a *goat* | <b>", 0.0, True, False, {}\n'


def _tables(round: int) -> RoundTables:
    """A round's tables as :func:`spade.pipeline.tracker.round_tables` builds them."""
    attempts = [
        {"slot": 0, "attempt": 0, "env_id": f"env-door{round}", "code": CODE, "accepted": True,
         "skill": "deduction", "strategy": "splice", "parent_id": "number_hunt",
         "directive": "clue"},
        {"slot": 1, "attempt": 0, "env_id": None, "code": None, "accepted": False,
         "failure_kind": "parse", "failure_reason": "no ```python block", "skill": "deduction",
         "strategy": "write"},
    ]  # fmt: skip
    scored = [
        {"slot": 0, "attempt": 0, "env_id": f"env-door{round}", "accepted": True,
         "win_rate": 0.25, "hinted_win_rate": 0.75, "regret": 0.5, "raw_reward": 0.375},
        {"slot": 1, "attempt": 0, "accepted": False, "failure": "parse", "raw_reward": -1.0},
    ]  # fmt: skip
    hints = {f"env-door{round}": "The prize_is never behind door 1."}
    play = {
        "env_id": f"env-door{round}", "seed": 40 + round, "hinted": True,
        "status": "terminated", "return": 1.0,
        "messages": [{"role": "user", "content": "Three doors."}],
        "turns": [{"action": "door 2", "observation": "a prize!"}],
    }  # fmt: skip
    return RoundTables(
        round, design_rows(round, attempts, scored, hints), [rollout_row(round, play, "designed")]
    )


def test_wandb_tables_read_back_from_the_offline_run(tmp_path, wandb_offline):
    cfg = _cfg(tmp_path, **{"metrics.wandb": True})
    for r in (0, 1):
        assert log_round(cfg, CID, r, _row(r), tables=lambda r=r: _tables(r)) == []
    history = {step: run for run in wandb_offline() for step in run.history}
    assert sorted(history) == [0, 1]
    for step, run in history.items():
        assert run.history[step]["win_rate"] == _row(step)["win_rate"]  # the same history row
        designs = run.table(step, "designs")
        assert designs == _tables(step).designs  # every column, in order, values as logged
        accepted, parse = designs
        assert (accepted["env_id"], accepted["verdict"], accepted["code"]) == (
            f"env-door{step}", "accepted", CODE,
        )  # fmt: skip
        assert (accepted["win_rate"], accepted["hinted_win_rate"]) == (0.25, 0.75)
        assert (accepted["regret"], accepted["designer_reward"]) == (0.5, 0.375)
        assert accepted["hint"] == "The prize_is never behind door 1."
        assert (parse["verdict"], parse["reason"], parse["win_rate"]) == (
            "parse", "no ```python block", None,
        )  # fmt: skip
        (rollout,) = run.table(step, "rollouts")
        assert (rollout["seed"], rollout["hinted"], rollout["return"]) == (40 + step, True, 1.0)
        assert rollout["transcript"] == (
            "[start] Three doors.\n[1] > door 2\n    a prize!\n[end] terminated, return 1"
        )


def test_tensorboard_tables_as_text(tmp_path):
    cfg = _cfg(tmp_path, **{"metrics.tensorboard_dir": str(tmp_path / "tb")})
    for r in (0, 1):
        assert log_round(cfg, CID, r, _row(r), tables=lambda r=r: _tables(r)) == []
    designs = text_tables(tmp_path / "tb" / CID, "designs")
    rollouts = text_tables(tmp_path / "tb" / CID, "rollouts")
    assert sorted(designs) == sorted(rollouts) == [0, 1]
    header, accepted, parse = designs[1]
    assert header == [f"**{c}**" for c in DESIGN_COLUMNS]
    cell = dict(zip(DESIGN_COLUMNS, accepted, strict=True))
    assert (cell["round"], cell["env_id"], cell["verdict"]) == ("1", "env-door1", "accepted")
    assert (cell["win_rate"], cell["designer_reward"]) == ("0.25", "0.375")
    assert cell["code"] == f"```\n{CODE}\n```"  # a block: its lines and indentation kept
    assert cell["hint"] == r"The prize\_is never behind door 1."  # text, not emphasis
    cell = dict(zip(DESIGN_COLUMNS, parse, strict=True))
    assert cell["reason"] == "````\nno ```python block\n````"  # a fence longer than its own
    assert (cell["env_id"], cell["win_rate"], cell["code"]) == ("", "", "")  # None: empty
    header, rollout = rollouts[0]
    cell = dict(zip(ROLLOUT_COLUMNS, rollout, strict=True))
    assert (cell["seed"], cell["hinted"], cell["return"]) == ("40", "True", "1")
    assert cell["transcript"].startswith("```\n[start] Three doors.\n[1] > door 2\n")


# bleach, vendored by tensorboard, warns that html5lib's sanitizer is deprecated
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_markdown_cells_render_as_their_text():
    from tensorboard.plugin_util import markdown_to_safe_html

    hint = "a_b c_d *x* [l](u) <b>bold</b> #h | p > q"
    assert markdown_to_safe_html(markdown_cell("hint", hint)) == (
        "<p>a_b c_d *x* [l](u) &lt;b&gt;bold&lt;/b&gt; #h | p &gt; q</p>"
    )
    assert markdown_to_safe_html(markdown_cell("code", CODE)).startswith("<pre><code>class")
    assert markdown_cell("regret", 1 / 3) == "0.3333" and markdown_cell("hint", None) == ""


def test_tables_that_cannot_be_read_only_warn(tmp_path):
    cfg = _cfg(tmp_path, **{"metrics.tensorboard_dir": str(tmp_path / "tb")})

    def unreadable() -> RoundTables:
        raise OSError("store unreachable")

    problems = log_round(cfg, CID, 0, _row(0), tables=unreadable)
    assert problems == ["metrics: round 0's tables could not be read: OSError('store unreachable')"]
    assert text_tables(tmp_path / "tb" / CID, "designs") == {}
    assert set(_scalar_steps(tmp_path / "tb" / CID, "win_rate")) == {0}  # the numbers are in


def test_tables_a_sink_cannot_write_only_warn(tmp_path, monkeypatch):
    from spade.metrics import sinks

    def broken(self, tables, step):
        raise ValueError("no room for tables")

    monkeypatch.setattr(sinks.TensorBoardSink, "log_tables", broken)
    cfg = _cfg(tmp_path, **{"metrics.tensorboard_dir": str(tmp_path / "tb")})
    problems = log_round(cfg, CID, 2, _row(2), tables=lambda: _tables(2))
    assert problems == [
        "metrics: tensorboard sink did not record round 2's tables: ValueError('no room for tables')"
    ]
    assert set(_scalar_steps(tmp_path / "tb" / CID, "win_rate")) == {2}


def test_tables_off_or_no_sink_reads_nothing(tmp_path):
    def never() -> RoundTables:
        raise AssertionError("the tables were read")

    assert log_round(_cfg(tmp_path), CID, 0, _row(0), tables=never) == []  # no sink
    cfg = _cfg(
        tmp_path, **{"metrics.tensorboard_dir": str(tmp_path / "tb"), "metrics.tables": False}
    )
    assert log_round(cfg, CID, 0, _row(0), tables=never) == []
    assert text_tables(tmp_path / "tb" / CID, "designs") == {}
    empty = RoundTables(0)  # a round with nothing to show: no table, no problem
    assert log_round(_cfg(tmp_path, **{"metrics.tensorboard_dir": str(tmp_path / "tb2")}), CID, 0, _row(0), tables=lambda: empty) == []  # fmt: skip
    assert text_tables(tmp_path / "tb2" / CID, "designs") == {}


def test_a_stored_round_reaches_tensorboard_as_tables(tmp_path):
    """What the campaign flow passes: the round's tables read from the store
    (:func:`spade.pipeline.tracker.round_tables`), here a synthetic campaign's."""
    from functools import partial

    from spade.pipeline.tracker import round_tables
    from spade.testing.synthetic import build_campaign

    camp = build_campaign(tmp_path / "store", CID, rounds=1, environments=3, suites=False)
    cfg = _cfg(
        tmp_path,
        **{"metrics.tensorboard_dir": str(tmp_path / "tb"), "metrics.rollout_samples": 5},
    )
    cs = campaign_store(cfg, CID)
    tables = partial(round_tables, cs, 0, cfg.metrics.rollout_samples, cfg.seed)
    assert log_round(cfg, CID, 0, summarize_round(cs, 0), tables=tables) == []
    (designs,) = text_tables(tmp_path / "tb" / CID, "designs").values()
    assert len(designs) - 1 == camp.expected[0]["attempts"]  # a row per attempt, and the header
    verdicts = [dict(zip(DESIGN_COLUMNS, row, strict=True))["verdict"] for row in designs[1:]]
    assert verdicts.count("accepted") == camp.expected[0]["accepted"]
    (rollouts,) = text_tables(tmp_path / "tb" / CID, "rollouts").values()
    assert len(rollouts) - 1 == 5


def _scalar_steps(log_dir: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]
