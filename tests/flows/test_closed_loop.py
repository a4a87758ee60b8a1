"""The loop closes in every round, however many designs pass (``run.min_envs``, graded rewards),
and the fixed-pool baseline (``run.env_source: pool``), on a temporary local Prefect API against
the OpenAI-compatible stand-in, with a tiny random-weight policy trained as a LoRA adapter that
the stand-in then serves under its version's name.

The stand-in designer here writes nothing that passes: each first answer is, in turn, no code,
a syntax error or an infeasible game, and a repair turn repeats it. The pool is two scripted
environments: ``HalfEnv`` (spade/testing/scripted_designer.py; the agent wins the even
puzzles unhinted: on consecutive seeds, every other play) with a declared hint, and ``LockerEnv`` (won only
with the hint), whose hint the stand-in writes.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from flows.round import round_flow
from spade.config import load_config
from spade.pipeline.context import RoundContext
from spade.pipeline.record import campaign_store, read_jsonl
from spade.pipeline.state import carried_state
from spade.pipeline.summary import summarize_round
from spade.storage import STAGES
from spade.testing.scripted_designer import HALF, INFEASIBLE, ScriptedModel

pytestmark = pytest.mark.sandbox

SYNTAX = "```python\nclass BrokenEnv(TextEnv:\n    pass\n```"
FIRST_ANSWERS = ("I would rather not write code today.", SYNTAX, f"```python\n{INFEASIBLE}```")
HALF_HINT = "Puzzles with an even number open with a very common crystal."
LOCKER = """
from spade.envs import TextEnv


class LockerEnv(TextEnv):
    skill = "logical_deduction"

    def reset(self, seed=None, options=None):
        self.number = seed if seed is not None else 0
        return super().reset(seed, options)

    def setup(self):
        self.tries = 0
        return f"Locker #{self.number}: name the secret word in \\\\boxed{{}}. Three tries."

    def play(self, move):
        self.tries += 1
        if move.strip().lower() == "azure":
            return "Open!", 1.0, True
        if self.tries >= 3:
            return "Still locked.", 0.0, True
        return "No.", 0.0, False

    def solution(self):
        return ["\\\\boxed{azure}"]
"""
LORA = {"training.lora.enabled": True, "training.lora.rank": 4, "training.lora.alpha": 8}


class NothingPasses(ScriptedModel):
    """Designs that fail at different depths of the verifier; the scripted hints and plays."""

    def __init__(self) -> None:
        super().__init__()
        self.first_answers = 0
        self.counter = threading.Lock()

    def design(self, prompt: str) -> str:
        with self.counter:
            self.first_answers += 1
            return FIRST_ANSWERS[(self.first_answers - 1) % len(FIRST_ANSWERS)]

    def play(self, messages: list[dict[str, Any]]) -> str:
        first = messages[1]["content"]
        if first.startswith("Locker #"):
            return "\\boxed{azure}" if "HINT:" in first else "I think \\boxed{red}"
        return super().play(messages)

    def __call__(self, request: dict[str, Any]) -> str:
        messages = request["messages"]
        if messages[0]["content"].startswith("You write correct") and len(messages) > 2:
            return str(messages[2]["content"])  # a repair turn: the same answer again
        return super().__call__(request)


def write_pool(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    half = HALF.replace(
        '    skill = "spatial_reasoning"\n',
        f'    skill = "spatial_reasoning"\n    hint = "{HALF_HINT}"\n',
    )
    (folder / "half.py").write_text(half)
    (folder / "locker.py").write_text(LOCKER)
    return folder


def _config(server, tmp_path: Path, policy: Path, seed: int, **more: object):
    from spade.testing.scripted_designer import round_overrides, tiny_policy_overrides, write_corpus

    return load_config(
        overrides={
            **round_overrides(server, write_corpus(tmp_path / "corpus.jsonl")),
            **LORA,
            "name": "closed-loop",
            "seed": seed,
            "storage.root": str(tmp_path / "store"),
            **tiny_policy_overrides(policy),
            "designer.envs_per_round": 2,
            "designer.active_skills": 1,
            "evaluation.unhinted_plays": 4,
            "evaluation.hinted_plays": 2,
            "scoring.rejected_reward": "graded",
            "training.lr": 1e-3,
            "training.designer_lr": 1e-3,
            "run.regen_interval": 1,
            "run.min_envs": 2,
            "run.env_pool": str(write_pool(tmp_path / "pool")),
            **more,
        }
    )


def _run(cfg, cid: str, r: int) -> None:
    state = asyncio.run(round_flow(config=cfg, campaign_id=cid, round_index=r, return_state=True))
    assert state.is_completed(), state


def _models(server, since: int) -> set[str]:
    return {r["model"] for r in server.chat_requests[since:]}


@pytest.mark.parametrize("seed", [0, pytest.param(7, marks=pytest.mark.slow)])  # 7: odd seeds
def test_a_round_that_accepts_nothing_still_plays_trains_and_publishes(
    prefect_api, nothing_passes, tiny_policy, tmp_path, seed
):
    cfg = _config(nothing_passes, tmp_path, tiny_policy, seed)
    cs = campaign_store(cfg, "loop")
    _run(cfg, "loop", 0)
    assert cs.completed_stages(0) == list(STAGES)
    scored = read_jsonl(cs, cs.layout.stage_key(0, "score", "scored.jsonl"))
    designs = [s for s in scored if s["source"] == "designed"]
    pool = [s for s in scored if s["source"] == "pool"]
    assert designs and not any(s["accepted"] for s in designs)
    assert {s["failure"] for s in designs} >= {"parse", "syntax"}
    # graded: no code -6/7, syntax -5/7, infeasible -1/7 (before centring), and up to half a
    # step more for the progress within the tier (checks passed, code that parses)
    grades = {"parse": -6 / 7, "syntax": -5 / 7, "infeasible": -1 / 7, "seed_independent": -1 / 7}
    assert all(0 <= s["progress"] <= 1 for s in designs)
    assert all(s["progress"] > 0 for s in designs if s["failure"] == "infeasible")
    assert all(
        s["raw_reward"] == pytest.approx(grades[s["failure"]] + 0.5 * s["progress"] / 7)
        for s in designs
    )
    assert len(pool) == 2 and all(s["reward"] is None for s in pool)  # never the designer's
    # the pool environments were verified, hinted (declared, or by the model) and played
    envs = read_jsonl(cs, cs.layout.stage_key(0, "pool", "environments.jsonl"))
    hints = {e["file"]: (e["hint_source"], e["hint"]) for e in envs}
    assert hints["half"] == ("declared", HALF_HINT) and hints["locker"][0] == "model"
    evaluations = read_jsonl(cs, cs.layout.stage_key(0, "evaluate", "evaluations.jsonl"))
    assert {e["source"] for e in evaluations} == {"pool"} and len(evaluations) == 2
    by_file = {e["file"]: e["env_id"] for e in envs}
    half = next(e for e in evaluations if e["env_id"] == by_file["half"])
    # four consecutive seeds, the round's own: the even puzzles won, every other play
    assert half["unhinted_returns"] in ([1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0])
    memory = cs.store.read_json(cs.layout.stage_key(0, "memory", "memory.json"))
    assert memory["records"] == []  # pool environments are not designs
    # both roles trained, with non-zero advantages (else the stage is skipped)
    agent = cs.store.read_json(cs.layout.stage_key(0, "train_agent", "outcome.json"))
    designer = cs.store.read_json(cs.layout.stage_key(0, "train_designer", "outcome.json"))
    assert agent["samples"] > 0 and "skipped" not in agent, agent
    assert designer["samples"] == len(designs) and "skipped" not in designer, designer
    row = summarize_round(campaign_store(cfg, "loop"), 0)
    assert (row["accepted"], row["pool_envs"]) == (0, 2) and row["designer_spread"] > 0
    assert row["weights"] == "r0000-designer" and row["train_loss"] is not None
    assert row["designer_loss"] is not None and row["pool_episodes"] == 8

    # round 1 serves what round 0 published, and closes the loop again
    assert carried_state(RoundContext.open(cfg, "loop", 1)).weights.version == "r0000-designer"
    seen = len(nothing_passes.chat_requests)
    _run(cfg, "loop", 1)
    assert _models(nothing_passes, seen) == {"r0000-designer"}
    assert summarize_round(campaign_store(cfg, "loop"), 1)["weights"] == "r0001-designer"


def test_the_fixed_pool_baseline_designs_nothing_and_trains_the_agent(
    prefect_api, nothing_passes, tiny_policy, tmp_path
):
    """env_source pool: no design, hint or designer call; the pool environments are played and
    the agent trains on them; the designer stage is skipped with the reason; with
    regen_interval 2 the next round replays the same pool environments."""
    cfg = _config(
        nothing_passes,
        tmp_path,
        tiny_policy,
        0,
        **{"run.env_source": "pool", "run.min_envs": 0, "run.regen_interval": 2},
    )
    cs = campaign_store(cfg, "base")
    _run(cfg, "base", 0)
    prompts = [r["messages"][0]["content"] for r in nothing_passes.chat_requests]
    assert not any(p.startswith("You write correct") for p in prompts)
    for stage in ("sample_documents", "design", "verify", "hint", "train_designer"):
        manifest = cs.read_stage_manifest(0, stage)
        assert manifest is not None and manifest.status == "skipped", stage
        assert "pool" in manifest.note
    envs = read_jsonl(cs, cs.layout.stage_key(0, "pool", "environments.jsonl"))
    assert sorted(e["file"] for e in envs) == ["half", "locker"]  # designer.envs_per_round: 2
    row = summarize_round(campaign_store(cfg, "base"), 0)
    assert (row["attempts"], row["pool_envs"], row["designer_reward"]) == (0, 2, None)
    assert row["train_loss"] is not None and row["weights"] == "r0000-agent"
    seen = len(nothing_passes.chat_requests)
    _run(cfg, "base", 1)  # a replay round: the same pool environments, new weights
    assert read_jsonl(cs, cs.layout.stage_key(1, "pool", "environments.jsonl")) == envs
    assert _models(nothing_passes, seen) == {"r0000-agent"}
    assert summarize_round(campaign_store(cfg, "base"), 1)["replay_of"] == 0
