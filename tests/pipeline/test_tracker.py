"""A round's tables for the tracker sinks, read from the stage files a test writes."""

from __future__ import annotations

from typing import Any

from spade.config import load_config
from spade.pipeline.record import campaign_store, jsonl
from spade.pipeline.tracker import round_tables
from spade.storage import CampaignStore


def _write(cs: CampaignStore, round: int, stage: str, name: str, rows: Any) -> None:
    key = cs.layout.stage_key(round, stage, name)
    if name.endswith(".jsonl"):
        cs.store.write_bytes(key, jsonl(rows))
    else:
        cs.store.write_json(key, rows)


def _play(env_id: str, seed: int, hinted: bool, won: bool) -> dict[str, Any]:
    return {
        "env_id": env_id, "seed": seed, "hinted": hinted, "status": "terminated",
        "messages": [{"role": "user", "content": f"{env_id}: pick a door (seed {seed})"}],
        "turns": [{"action": "door 2", "observation": "a prize!" if won else "a goat"}],
        "failure": None, "return": float(won),
    }  # fmt: skip


def _design_round(cs: CampaignStore, round: int) -> None:
    """Two attempts (one accepted, one a parse failure), a pool environment beside the design,
    two unhinted and two hinted plays of each environment."""
    attempts = [
        {"slot": 0, "attempt": 0, "skill": "deduction", "env_id": "env-door",
         "code": "class Doors(TextEnv): ...", "accepted": True, "failure_kind": None,
         "failure_reason": None, "strategy": "splice", "parent_id": "number_hunt",
         "directive": "clue", "hint": None},
        {"slot": 1, "attempt": 0, "skill": "deduction", "env_id": None, "code": None,
         "accepted": False, "failure_kind": "parse", "failure_reason": "no code block",
         "strategy": "write", "parent_id": None, "directive": None, "hint": None},
    ]  # fmt: skip
    _write(cs, round, "verify", "attempts.jsonl", attempts)
    scored = [
        {"slot": 0, "attempt": 0, "source": "designed", "env_id": "env-door", "accepted": True,
         "failure": None, "win_rate": 0.5, "hinted_win_rate": 1.0, "regret": 0.5,
         "reward": 0.5, "raw_reward": 0.75, "strategy": "splice", "parent": "number_hunt",
         "directive": "clue", "checks": {}},
        {"slot": 1, "attempt": 0, "source": "designed", "env_id": None, "accepted": False,
         "failure": "parse", "win_rate": None, "hinted_win_rate": None, "regret": None,
         "reward": -0.5, "raw_reward": -1.0, "strategy": "write", "parent": None,
         "directive": None, "checks": {}},
        {"source": "pool", "env_id": "env-pool", "accepted": True, "failure": None,
         "win_rate": 0.0, "hinted_win_rate": 0.5, "regret": 0.5, "reward": None},
    ]  # fmt: skip
    _write(cs, round, "score", "scored.jsonl", scored)
    hints = [{"env_id": "env-door", "hint": "The prize is never behind door 1."}]
    _write(cs, round, "hint", "environments.jsonl", hints)
    evaluations = [
        {"env_id": "env-door", "source": "designed"},
        {"env_id": "env-pool", "source": "pool"},
    ]
    _write(cs, round, "evaluate", "evaluations.jsonl", evaluations)
    for env_id in ("env-door", "env-pool"):
        plays = [_play(env_id, s, h, won=h) for h in (False, True) for s in (10, 11)]
        _write(cs, round, "evaluate", f"envs/{env_id}/trajectories.jsonl", plays)


def test_a_design_round_and_a_sample_of_its_plays(tmp_path):
    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    _design_round(cs, 0)
    tables = round_tables(cs, 0, samples=3, seed=7)
    door, parse = tables.designs
    assert (door["env_id"], door["verdict"], door["code"]) == (
        "env-door", "accepted", "class Doors(TextEnv): ...",
    )  # fmt: skip
    assert (door["hint"], door["win_rate"], door["hinted_win_rate"]) == (
        "The prize is never behind door 1.", 0.5, 1.0,
    )  # fmt: skip
    assert (door["regret"], door["designer_reward"], door["parent"]) == (0.5, 0.75, "number_hunt")
    assert (parse["verdict"], parse["reason"], parse["code"]) == ("parse", "no code block", "")
    assert len(tables.rollouts) == 3
    assert {r["env_id"] for r in tables.rollouts} == {"env-door", "env-pool"}
    sources = {r["env_id"]: r["source"] for r in tables.rollouts}
    assert sources == {"env-door": "designed", "env-pool": "pool"}
    for r in tables.rollouts:
        assert r["return"] == float(r["hinted"]) and r["seed"] in (10, 11)
        assert r["transcript"].startswith(f"[start] {r['env_id']}: pick a door")
    again = round_tables(campaign_store(cfg, "c"), 0, samples=3, seed=7)
    assert again.rollouts == tables.rollouts  # the same draw when the round is logged again
    assert round_tables(cs, 0, samples=0, seed=7).rollouts == []


def test_a_replay_round_shows_the_replayed_designs_with_its_own_numbers(tmp_path):
    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    _design_round(cs, 0)
    _write(cs, 1, "sample_documents", "plan.json", {"regeneration": 0, "replay_of": 0})
    replayed = {"slot": 0, "attempt": 0, "source": "designed", "env_id": "env-door",
                "accepted": True, "failure": None, "win_rate": 1.0, "hinted_win_rate": 1.0,
                "regret": 0.0, "reward": 0.0, "raw_reward": 0.0}  # fmt: skip
    _write(cs, 1, "score", "scored.jsonl", [replayed])
    hints = [{"env_id": "env-door", "hint": "The prize is never behind door 1."}]
    _write(cs, 1, "hint", "environments.jsonl", hints)
    (row,) = round_tables(cs, 1, samples=4, seed=7).designs
    assert (row["round"], row["env_id"], row["code"]) == (
        1,
        "env-door",
        "class Doors(TextEnv): ...",
    )
    assert (row["win_rate"], row["regret"], row["directive"]) == (1.0, 0.0, "clue")


def test_a_round_with_nothing_stored_has_empty_tables(tmp_path):
    cs = campaign_store(load_config(overrides={"storage.root": str(tmp_path)}), "c")
    tables = round_tables(cs, 4, samples=8, seed=0)
    assert (tables.round, tables.designs, tables.rollouts) == (4, [], [])
    assert not tables
