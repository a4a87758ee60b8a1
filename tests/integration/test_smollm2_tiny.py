"""The design -> verify -> hint -> evaluate -> score path with the shipped SmolLM2 on CPU.

A 135M model will rarely write a valid environment; the point is that the real path runs
offline end to end and records what it produced, accepted or not. An accepted design is the
one evaluated; otherwise a bundled example is, and the batch (then all rejected designs) is
scored all the same. Assertions are on what was recorded, never on the model's quality.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from spade.cli.selfplay import run_design, run_evaluate
from spade.config import load_config
from spade.designer.designer import env_id_for
from spade.pipeline.context import RoundContext
from spade.pipeline.record import read_jsonl
from spade.pipeline.score import score_round

# slow (56 s): the demo campaign's test (tests/dashboard/test_demo_campaign.py) plays the same
# real SmolLM2 path through the flow, and tests/cli/test_selfplay_cli.py these commands
pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "spade" / "envs" / "examples"


def test_tiny_round_with_smollm2(tmp_path, smol_env):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": "The Moon orbits the Earth every 27 days. " * 10}) + "\n")
    cfg = load_config(
        overrides={
            "corpus.path": str(corpus),
            "designer.envs_per_round": 1,
            "designer.attempts_per_slot": 1,
            "designer.max_tokens": 160,
            "designer.hint_max_tokens": 32,
            "evaluation.unhinted_plays": 1,
            "evaluation.hinted_plays": 1,
            "evaluation.max_turns": 2,
            "evaluation.max_tokens_per_turn": 24,
            "storage.root": str(tmp_path / "runs"),
            "scoring.centre_per_skill": False,  # a lone design would be centred to 0
        }
    )
    attempts = asyncio.run(run_design(cfg, tmp_path / "design"))
    (attempt,) = attempts
    assert attempt.completion and attempt.model.startswith("smollm2-135m-instruct")
    assert attempt.token_ids and len(attempt.logprobs) == len(attempt.token_ids)
    assert attempt.accepted or (attempt.failure_kind and attempt.failure_reason)
    saved = [
        json.loads(line)
        for line in (tmp_path / "design" / "attempts.jsonl").read_text().splitlines()
    ]
    assert saved[0]["completion"] == attempt.completion
    # The verifier's verdict is recorded for every design that had code (none for the rest).
    assert (attempt.verdict is not None) == (attempt.code is not None)
    assert saved[0]["verdict"] == attempt.verdict
    if attempt.verdict is not None:
        assert attempt.verdict["accepted"] == attempt.accepted and attempt.verdict["checks"]
        assert attempt.accepted or attempt.verdict["failed_check"]
    else:
        assert attempt.failure_kind in ("parse", "inference")

    if attempt.accepted:  # evaluate the design itself, with the hint the design step wrote
        env = tmp_path / "design" / "envs" / f"{attempt.env_id}.py"
        assert env.is_file()
    else:
        # A bundled environment with a hint SmolLM2 writes (no .hint.txt, but the class has
        # its own hint: remove it from a copy so the model must write one).
        env = tmp_path / "maze.py"
        env.write_text(
            (EXAMPLES / "maze_walk.py").read_text().replace("    hint = ", "    _unused_hint = ")
        )
    (result,) = asyncio.run(run_evaluate(cfg, [env], tmp_path / "eval"))
    assert result.env_id == env_id_for(env.read_text())
    assert len(result.unhinted_returns) == 1 and len(result.hinted_returns) <= 1
    assert (result.hinted_win_rate is None) == (not result.hinted_returns)
    assert 0.0 <= result.regret <= 1.0
    rows = (tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()
    assert rows and all(json.loads(r)["turns"] for r in rows)
    (evaluation,) = map(
        json.loads, (tmp_path / "eval" / "evaluations.jsonl").read_text().splitlines()
    )
    assert evaluation["hint"] or evaluation["hint_note"]  # a hint, or why there is none

    # Score the batch as the score stage does, and read back what it recorded.
    ctx = RoundContext.open(cfg, "smol", 0)
    scores = score_round(ctx, attempts, [result], {})
    store = ctx.store
    (row,) = read_jsonl(store, store.layout.stage_key(0, "score", "scored.jsonl"))
    assert row["accepted"] == attempt.accepted and row["failure"] == attempt.failure_kind
    assert row["skill"] == attempt.skill and row["reward"] == scores.rewards[0]
    if attempt.accepted:
        assert row["env_id"] == attempt.env_id == result.env_id
        assert (row["win_rate"], row["regret"]) == (result.win_rate, result.regret)
        assert 0.0 <= row["reward"] <= 1.0  # blend, uncentred
        assert scores.ema == {attempt.skill: result.win_rate}
    else:  # the penalty for an invalid design
        penalty = (
            cfg.scoring.timeout_penalty
            if attempt.failure_kind == "timeout"
            else cfg.scoring.invalid_reward
        )
        assert row["reward"] == penalty and row["win_rate"] is None and row["regret"] is None
        assert scores.ema == {}

    # One GRPO update on those plays, twice: the second resumes the first's checkpoint.
    from spade.training.run import train_once

    ckpts = str(tmp_path / "ckpt")
    first = train_once(cfg, "agent", tmp_path / "eval" / "trajectories.jsonl", ckpts)
    assert first.samples >= 1 and first.resumed_from is None
    assert first.metrics["tokens"] > 0 and first.metrics["loss"] == first.metrics["loss"]  # finite
    second = train_once(cfg, "agent", tmp_path / "eval" / "trajectories.jsonl", ckpts)
    assert second.resumed_from == first.checkpoint and second.checkpoint.endswith("step-00000002")
