"""The reference's own pool layout, end to end: ``spade pool import`` of the fixture pool
(tests/fixtures/reference_pool, environments written in the reference's style: ToolUseBaseEnv
without an import, numpy, math_verify, a fixed instance, a broken one) with seed_dependence
waived, then a campaign round in fixed-pool mode (``run.env_pool: pool:<name>``) that plays
every accepted environment in the jail, trains the agent on them and publishes.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from spade.cli import app
from spade.pipeline.record import campaign_store, read_jsonl
from spade.pipeline.summary import summarize_round
from tests.flows.test_closed_loop import _config, _run

# slow (43 s): the pool's designs load and play in tests/sandbox/test_reference_pool.py, and a
# fixed-pool campaign trains in the round-flow tests
pytestmark = [pytest.mark.sandbox, pytest.mark.slow]
POOL = Path(__file__).resolve().parents[1] / "fixtures" / "reference_pool"
ACCEPTED = {
    "game_file_organiser",
    "game_inventory_audit",
    "game_modular_chain",
    "game_fraction_sum",
    "game_matrix_walks",
    "game_fixed_lighthouses",  # accepted with seed_dependence waived
}


class Fumbles:
    """A player that knows nothing of these games but the one answer that never changes: its
    moves cycle through a wrong answer in each form the environments read and one move that is
    no action at all, except that every other play of one task text opens with 6006, the fixed
    answer of game_fixed_lighthouses (the same on every seed: why seed_dependence rejects it).
    So that environment's plays end differently on any instances a round draws (half win, half
    lose), and the agent has something to learn from."""

    MOVES = ("\\boxed{0}", "<answer>0</answer>", "let me think")
    FIXED_ANSWER = "\\boxed{6006}"

    def __init__(self) -> None:
        self.moves = itertools.cycle(self.MOVES)
        self.plays: Counter[str] = Counter()  # plays opened per first user message
        self.lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> str:
        messages = request["messages"]
        with self.lock:
            if not any(m["role"] == "assistant" for m in messages):  # a play's first turn
                task = next(m["content"] for m in messages if m["role"] == "user")
                self.plays[task] += 1
                if self.plays[task] % 2 == 0:
                    return self.FIXED_ANSWER
            return next(self.moves)


def test_the_reference_fixture_pool_imports_and_trains_a_fixed_pool_campaign(
    prefect_api, tiny_policy, tmp_path
):
    from spade.testing.openai_server import FakeOpenAIServer

    with FakeOpenAIServer(script=Fumbles()) as server:
        cfg = _config(
            server,
            tmp_path,
            tiny_policy,
            0,
            **{
                "run.env_source": "pool",
                "run.env_pool": "pool:ref",
                "run.min_envs": 0,
                "designer.envs_per_round": 6,  # every accepted environment each round
            },
        )
        where = ["--store", cfg.storage.root, "--name", "ref", "--waive", "seed_dependence"]
        done = CliRunner().invoke(app, ["pool", "import", str(POOL), *where, "--json"])
        assert done.exit_code == 0, done.output
        assert "game_broken_ledger" in done.output and "AttributeError" in done.output
        cs = campaign_store(cfg, "ref-pool")
        _run(cfg, "ref-pool", 0)
    played = read_jsonl(cs, cs.layout.stage_key(0, "pool", "environments.jsonl"))
    assert {e["file"] for e in played} == ACCEPTED
    evaluations = read_jsonl(cs, cs.layout.stage_key(0, "evaluate", "evaluations.jsonl"))
    assert len(evaluations) == len(ACCEPTED)
    # every play ran to its end in the jail: none failed on the environment's side or ours
    assert all(e["failed_plays"] == 0 == e["env_failed_plays"] for e in evaluations), evaluations
    assert all(len(e["unhinted_returns"]) == 4 for e in evaluations)
    agent = cs.store.read_json(cs.layout.stage_key(0, "train_agent", "outcome.json"))
    assert agent["samples"] > 0 and "skipped" not in agent, agent
    row = summarize_round(cs, 0)
    assert (row["attempts"], row["pool_envs"], row["weights"]) == (0, 6, "r0000-agent")
