"""A resumed round recomputes the stage whose input file was edited and takes every other stage
from the cache (issue 12, finding 'stale cache': keys held a file's path, not its contents)."""

from __future__ import annotations

import asyncio

import pytest

from flows.round import round_flow
from spade.config import load_config
from spade.pipeline.record import campaign_store
from spade.testing.scripted_designer import METAL
from tests.flows.test_round_flow import task_states

pytestmark = [pytest.mark.sandbox, pytest.mark.attack]


def _plays(server) -> int:
    return sum(
        not (r["messages"][0].get("content") or "").startswith(("You write correct", "You coach"))
        for r in server.chat_requests
    )


def _run(cfg):
    state = asyncio.run(round_flow(config=cfg, campaign_id="edit", return_state=True))
    assert state.is_completed(), state
    return task_states(state.state_details.flow_run_id, expect=10)


def test_editing_a_heldout_environment_recomputes_only_the_heldout_stage(
    prefect_api, scripted_server, scripted_overrides, tmp_path
):
    held = tmp_path / "held" / "metal.py"
    held.parent.mkdir()
    held.write_text(METAL)
    cfg = load_config(
        overrides={
            **scripted_overrides,
            "name": "editflow",
            "storage.root": str(tmp_path / "store"),
            "designer.envs_per_round": 2,
            "designer.attempts_per_slot": 1,
            "evaluation.unhinted_plays": 1,
            "evaluation.hinted_plays": 1,
            "run.train": False,
            "run.heldout_envs": [str(held.parent)],
            "run.heldout_plays": 1,
        }
    )
    first = _run(cfg)
    assert first["heldout"] == {"Completed"}
    cs = campaign_store(cfg, "edit")
    summary = cs.store.read_json(cs.layout.stage_key(0, "heldout", "summary.json"))
    requests, plays = len(scripted_server.chat_requests), _plays(scripted_server)

    held.write_text(METAL + "\n# fixed after the round ran\n")
    again = _run(cfg)
    assert again.pop("heldout") == {"Completed"}  # its file changed: played again
    assert again and all(states == {"Cached"} for states in again.values()), again
    # only the held-out plays were asked again: no design, hint or evaluate request
    assert len(scripted_server.chat_requests) - requests == _plays(scripted_server) - plays > 0
    assert cs.store.read_json(cs.layout.stage_key(0, "heldout", "summary.json")) == summary
