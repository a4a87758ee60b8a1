"""The round flow's design phase on a temporary Prefect API against the OpenAI stand-in: a
design rejected with code gets a repair task, is verified and settled again, and its stage
artifacts stay complete; a re-run of the round takes the repair from the cache."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flows.round import round_flow
from spade.config import load_config
from spade.designer.designer import env_id_for
from spade.pipeline.record import campaign_store, read_jsonl
from spade.testing.openai_server import FakeOpenAIServer
from tests.designer.test_design_batch import (
    BACKWARDS,
    CODE_BREAKER,
    LOGIC,
    MATH,
    STUBBORN,
    Script,
    fenced,
    repair_requests,
    write_corpus,
)
from tests.flows.test_round_flow import task_states

pytestmark = pytest.mark.sandbox


def _config(server: FakeOpenAIServer, tmp_path: Any) -> Any:
    return load_config(
        overrides={
            "name": "repairflow",
            **server.overrides(),
            "corpus.path": str(write_corpus(tmp_path / "corpus.jsonl")),
            "storage.root": str(tmp_path / "store"),
            "designer.envs_per_round": 2,
            "designer.attempts_per_slot": 2,
            "evaluation.unhinted_plays": 1,
            "evaluation.hinted_plays": 1,
            "evaluation.max_turns": 2,
            "run.train": False,
        }
    )


class PlayingScript(Script):
    """The designer's script, and a move for the agent's turns (a play whose requests fail
    is an inference failure, which fails the evaluate stage)."""

    def __call__(self, request: dict[str, Any]) -> str:
        system = str(request["messages"][0]["content"])
        if system.startswith(("You write correct", "You coach")):
            return super().__call__(request)
        return "\\boxed{0000}"


def test_a_rejected_design_is_repaired_verified_and_settled_and_a_rerun_reuses_it(
    prefect_api, tmp_path
):
    script = PlayingScript(
        {MATH: [fenced(BACKWARDS)], LOGIC: [fenced(STUBBORN)]},
        repairs={MATH: [fenced(CODE_BREAKER)]},
    )
    with FakeOpenAIServer(script=script) as server:
        cfg = _config(server, tmp_path)
        state = asyncio.run(round_flow(config=cfg, campaign_id="rf", return_state=True))
        assert state.is_completed(), state
        states = task_states(state.state_details.flow_run_id, expect=8)
        assert states["repair"] == {"Completed"} and len(repair_requests(server)) == 1
        requests = len(server.chat_requests)

        cs = campaign_store(cfg, "rf")
        design = cs.read_stage_manifest(0, "design")
        assert design is not None
        assert {"attempt-0.jsonl", "attempt-0-repair-0.jsonl"} <= set(design.outputs)
        assert "attempt-1.jsonl" not in design.outputs  # both slots were accepted
        repaired = read_jsonl(cs, design.outputs["attempt-0-repair-0.jsonl"])
        assert [(r["skill"], r["code"] == CODE_BREAKER) for r in repaired] == [
            (MATH, True),
            (LOGIC, False),
        ]
        verify = cs.read_stage_manifest(0, "verify")
        assert verify is not None
        for code in (BACKWARDS, CODE_BREAKER, STUBBORN):  # the first answer's verdict too
            assert f"verdicts/{env_id_for(code)}" in verify.outputs
        rows = read_jsonl(cs, cs.layout.stage_key(0, "verify", "attempts.jsonl"))
        maths, logic = rows
        assert maths["accepted"] and maths["accepted_after_repair"]
        assert (maths["first_failure_kind"], maths["first_code"]) == ("infeasible", BACKWARDS)
        assert maths["token_ids"] == [ord(c) for c in fenced(BACKWARDS)]  # the first answer's
        assert logic["accepted"] and not logic["accepted_after_repair"]
        # an empty memory showed nothing: only the contract's format example is a reference
        assert all([r["name"] for r in row["references"]] == ["format_example"] for row in rows)
        evaluations = read_jsonl(cs, cs.layout.stage_key(0, "evaluate", "evaluations.jsonl"))
        assert {e["env_id"] for e in evaluations} == {
            env_id_for(CODE_BREAKER),
            env_id_for(STUBBORN),
        }

        again = asyncio.run(round_flow(config=cfg, campaign_id="rf", return_state=True))
        assert again.is_completed(), again
        states = task_states(again.state_details.flow_run_id, expect=8)
        for name in ("design", "verify", "settle", "repair", "hint"):
            assert states[name] == {"Cached"}, (name, states)
        assert len(server.chat_requests) == requests  # no model call was repeated
