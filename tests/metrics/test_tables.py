"""A round's designs and rollouts as table rows: the pure builders (no store, no sink)."""

from __future__ import annotations

from typing import Any

from spade.metrics.tables import (
    DESIGN_COLUMNS,
    ROLLOUT_COLUMNS,
    TEXT_LIMITS,
    clip,
    design_rows,
    rollout_row,
    sample_rollouts,
    turns_text,
)


def _attempt(slot: int, attempt: int, **more: Any) -> dict[str, Any]:
    """A row of ``verify/attempts.jsonl`` (the fields the table reads)."""
    return {
        "slot": slot, "attempt": attempt, "skill": "deduction", "env_id": None, "code": None,
        "accepted": False, "failure_kind": None, "failure_reason": None, "hint": None,
        "strategy": "splice", "parent_id": "number_hunt", "directive": "clue",
    } | more  # fmt: skip


def _scored(slot: int, attempt: int, **more: Any) -> dict[str, Any]:
    """A row of ``score/scored.jsonl`` for a design attempt."""
    return {
        "slot": slot, "attempt": attempt, "source": "designed", "skill": "deduction",
        "env_id": None, "accepted": False, "failure": None, "win_rate": None,
        "hinted_win_rate": None, "regret": None, "reward": -0.5, "raw_reward": -1.0,
        "strategy": "splice", "parent": "number_hunt", "directive": "clue",
    } | more  # fmt: skip


def _turn(action: str, observation: str, reward: float = 0.0) -> dict[str, Any]:
    return {"action": action, "observation": observation, "reward": reward}


def _play(env_id: str, seed: int, hinted: bool, turns: int = 2, **more: Any) -> dict[str, Any]:
    """A row of ``trajectories.jsonl`` (:meth:`spade.records.Trajectory.to_dict`'s shape)."""
    return {
        "env_id": env_id, "seed": seed, "hinted": hinted, "status": "terminated",
        "messages": [{"role": "system", "content": "Play."},
                     {"role": "user", "content": f"Guess a number (seed {seed})."}],
        "turns": [_turn(f"guess {i}", f"no, not {i}") for i in range(turns)],
        "failure": None, "return": 1.0 if hinted else 0.0,
    } | more  # fmt: skip


def test_a_design_row_per_attempt_with_verdict_numbers_and_code():
    code = "class Hunt(TextEnv):\n    pass\n"
    attempts = [
        _attempt(0, 0, env_id="env-a", code=code, accepted=True),
        _attempt(1, 0, failure_kind="parse", failure_reason="no ```python block"),
        _attempt(1, 1, env_id="env-c", code="x = 1\n", failure_kind="crash",
                 failure_reason="reset() raised KeyError: 'board'"),
    ]  # fmt: skip
    scored = [
        _scored(0, 0, env_id="env-a", accepted=True, win_rate=0.25, hinted_win_rate=0.75,
                regret=0.5, reward=0.2, raw_reward=0.4, checks={"informative": "answers vary"}),
        _scored(1, 0, failure="parse"),
        _scored(1, 1, env_id="env-c", failure="crash", reward=-0.25),
        {"source": "pool", "env_id": "env-pool", "accepted": True, "win_rate": 1.0},
    ]  # fmt: skip
    del scored[2]["raw_reward"]  # a row stored before raw rewards were
    rows = design_rows(3, attempts, scored, {"env-a": "Halve the range each guess."})
    assert [tuple(r) for r in rows] == [DESIGN_COLUMNS] * 3  # every column, in order; no pool row
    accepted, parse, crash = rows
    assert accepted | {"code": None} == {
        "round": 3, "env_id": "env-a", "slot": 0, "attempt": 0, "skill": "deduction",
        "strategy": "splice", "parent": "number_hunt", "directive": "clue",
        "verdict": "accepted", "reason": "informative: answers vary",
        "hint": "Halve the range each guess.", "win_rate": 0.25, "hinted_win_rate": 0.75,
        "regret": 0.5, "designer_reward": 0.4, "code": None,
    }  # fmt: skip
    assert accepted["code"] == code
    assert (parse["verdict"], parse["reason"], parse["code"]) == ("parse", "no ```python block", "")
    assert parse["env_id"] is None and parse["win_rate"] is None  # never played
    assert (crash["verdict"], crash["env_id"]) == ("crash", "env-c")
    assert crash["reason"] == "reset() raised KeyError: 'board'"
    assert crash["designer_reward"] == -0.25  # no raw reward stored: the reward


def test_design_rows_follow_the_score_stage_else_the_attempts():
    """A replayed design: the score row (this round's numbers) finds its attempt by slot and
    attempt; a round not scored yet lists its attempts without numbers; a request that failed
    on our side shows as such."""
    attempts = [_attempt(0, 0, env_id="env-a", code="a", accepted=True), _attempt(2, 1)]
    scored = [_scored(2, 1, failed=True, failure="inference", failure_reason="HTTP 503")]
    (row,) = design_rows(1, attempts, scored, {})
    assert (row["slot"], row["verdict"], row["reason"]) == (2, "inference", "HTTP 503")
    rows = design_rows(1, attempts, [], {})
    assert [(r["env_id"], r["verdict"], r["win_rate"]) for r in rows] == [
        ("env-a", "accepted", None),
        (None, "rejected", None),  # no failure kind stored
    ]


def test_long_code_is_cut_saying_how_much():
    assert clip("abc", 3) == "abc" and clip(None, 3) == ""
    assert clip("abcdef", 4) == "abcd… [2 more characters]"
    code = "x" * (TEXT_LIMITS["code"] + 10)
    (row,) = design_rows(0, [_attempt(0, 0, code=code)], [], {})
    assert row["code"].endswith("… [10 more characters]")


def test_a_play_as_text_turn_by_turn():
    play = _play("env-a", 7, hinted=False, turns=2)
    assert turns_text(play) == (
        "[start] Guess a number (seed 7).\n"
        "[1] > guess 0\n"
        "    no, not 0\n"
        "[2] > guess 1\n"
        "    no, not 1\n"
        "[end] terminated, return 0"
    )
    failed = _play("env-a", 7, False, turns=0, status="env_failed", failure={"kind": "crash", "reason": "step() raised\nValueError"})  # fmt: skip
    assert turns_text(failed).endswith(
        "[end] env_failed, return 0 (crash: step() raised ValueError)"
    )


def test_long_plays_and_long_fields_are_cut():
    head, tail = TEXT_LIMITS["head_turns"], TEXT_LIMITS["tail_turns"]
    play = _play("env-a", 1, False, turns=head + tail + 5)
    play["turns"][0]["observation"] = "o" * (TEXT_LIMITS["field"] + 50)
    text = turns_text(play)
    assert f"[{head}] > guess {head - 1}" in text and f"[{head + 1}] >" not in text
    assert "… 5 turns left out …" in text
    assert f"[{head + 5 + tail}] > guess {head + 5 + tail - 1}" in text  # the last turn
    assert "o" * TEXT_LIMITS["field"] + "… [50 more characters]" in text
    huge = _play("env-a", 1, False, turns=3)
    for turn in huge["turns"]:
        turn["observation"] = "w " * 10_000
    assert len(turns_text(huge)) < TEXT_LIMITS["transcript"] + 40


def test_rollout_row():
    row = rollout_row(2, _play("env-p", 11, hinted=True, turns=3), "pool")
    assert tuple(row) == ROLLOUT_COLUMNS
    assert {k: v for k, v in row.items() if k != "transcript"} == {
        "round": 2, "env_id": "env-p", "source": "pool", "seed": 11, "hinted": True,
        "status": "terminated", "turns": 3, "return": 1.0,
    }  # fmt: skip
    assert row["transcript"].startswith("[start] Guess a number (seed 11).")


def _plays_of(envs: dict[str, int], loaded: list[str]):
    """A loader of ``n`` unhinted and ``n`` hinted plays per environment, noting each load."""

    def load(env_id: str) -> list[dict[str, Any]]:
        loaded.append(env_id)
        n = envs[env_id]
        return [_play(env_id, s, h) for h in (False, True) for s in range(n)]

    return load


def test_the_sample_is_seeded_and_spread_over_environments():
    envs = {f"env-{i}": 3 for i in range(6)}
    loaded: list[str] = []
    picked = sample_rollouts(list(envs), _plays_of(envs, loaded), 4, seed="0:1")
    assert len(picked) == 4 and len({t["env_id"] for t in picked}) == 4  # four environments
    assert len(loaded) == 4  # the others' plays are never read
    again = sample_rollouts(list(reversed(envs)), _plays_of(envs, []), 4, seed="0:1")
    key = [(t["env_id"], t["seed"], t["hinted"]) for t in picked]
    assert key == [(t["env_id"], t["seed"], t["hinted"]) for t in again]  # same draw
    other = sample_rollouts(list(envs), _plays_of(envs, []), 4, seed="0:2")
    assert key != [(t["env_id"], t["seed"], t["hinted"]) for t in other]  # another round's


def test_few_environments_give_unhinted_and_hinted_plays_in_turn():
    envs = {"env-a": 3, "env-b": 1}
    picked = sample_rollouts(list(envs), _plays_of(envs, []), 6, seed=0)
    by_env = {e: [t["hinted"] for t in picked if t["env_id"] == e] for e in envs}
    assert by_env["env-b"] == [False, True]  # all it has
    assert by_env["env-a"] == [False, True, False, True]
    assert len(sample_rollouts(list(envs), _plays_of(envs, []), 100, seed=0)) == 8  # every play


def test_no_sample_and_no_failed_plays():
    envs = {"env-a": 2}
    loaded: list[str] = []
    assert sample_rollouts(list(envs), _plays_of(envs, loaded), 0, seed=0) == []
    assert loaded == []

    def load(env_id: str) -> list[dict[str, Any]]:
        return [_play(env_id, 1, False, status="inference_failed"), _play(env_id, 2, True)]

    picked = sample_rollouts(["env-a", "env-b"], load, 4, seed=0)
    assert sorted((t["env_id"], t["seed"]) for t in picked) == [("env-a", 2), ("env-b", 2)]
    assert sample_rollouts([], load, 4, seed=0) == []


def test_tables_import_no_tracker():
    """The rows are built without wandb or tensorboard (the sinks import them when enabled)."""
    from tests.test_import_light import modules_after

    loaded = modules_after("import spade.metrics.sinks, spade.metrics.tables")
    assert "spade.metrics.tables" in loaded
    assert sorted(m for m in loaded if m.split(".")[0] in ("wandb", "tensorboard")) == []
