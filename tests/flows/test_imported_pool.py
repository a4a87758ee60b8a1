"""An imported pool trains a campaign in fixed-pool mode (``run.env_pool: pool:<name>``, the
reference's fixed-environment GRPO baseline), and ``spade pool export`` of that campaign
imports back to the same sources and sha256s (a Hugging Face dataset too, loaded offline).

The pool is laid out as the reference lays its pools out (games/game_*.py, checksums.sha256,
manifest.jsonl): ``HalfEnv`` with a declared hint, a fixed-instance locker (one instance for
every seed: accepted only with seed_dependence waived, and the round verifies it with that
waiver again) and a game that does not parse.
"""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
from typer.testing import CliRunner

from spade.cli import app
from spade.config import VerifyConfig
from spade.curriculum.pool import seed_records
from spade.curriculum.stored import read_pool
from spade.pipeline.record import campaign_store, read_jsonl
from spade.pipeline.summary import summarize_round
from spade.pools import import_pool
from spade.storage import ObjectStore
from tests.flows.test_closed_loop import HALF_HINT, LOCKER, _config, _run
from tests.pools.builders import BROKEN, games_pool

pytestmark = pytest.mark.sandbox
FIXED_LOCKER = LOCKER.replace("self.number = seed if seed is not None else 0", "self.number = 7")


def _pool(tmp_path):
    from spade.testing.scripted_designer import HALF

    half = HALF.replace(
        '    skill = "spatial_reasoning"\n',
        f'    skill = "spatial_reasoning"\n    hint = "{HALF_HINT}"\n',
    )
    envs = {"game_half": half, "game_locker": FIXED_LOCKER, "game_broken": BROKEN}
    return games_pool(tmp_path / "published", envs), envs


def test_an_imported_pool_trains_in_fixed_pool_mode_and_exports_back(
    prefect_api, nothing_passes, tiny_policy, tmp_path, policy, monkeypatch
):
    root, envs = _pool(tmp_path)
    cfg = _config(
        nothing_passes,
        tmp_path,
        tiny_policy,
        0,
        **{
            "run.env_source": "pool",
            "run.env_pool": "pool:ref",
            "run.min_envs": 0,
            "memory.seed_pool": "pool:ref",
        },
    )
    store = ObjectStore.from_config(cfg.storage)
    waive = VerifyConfig(waive=["seed_dependence"])
    report = import_pool(str(root), store, "ref", policy=policy, config=waive)
    # both accepted games are fixed instances: the locker, and HalfEnv (one password behind a
    # puzzle number that varies by seed)
    assert (report.accepted, report.by_kind, report.waived) == (
        2,
        {"syntax": 1},
        {"seed_dependence": 2},
    )
    # (a) memory seeds: the stored pool's accepted environments, their skills declared
    seeds = {r.env_id: r.skill for r in seed_records(cfg)}
    assert seeds == {"game_half": "spatial_reasoning", "game_locker": "logical_deduction"}

    # (b) a fixed training pool: the round plays both (verified with their waiver
    # again), trains the agent on them and publishes
    cs = campaign_store(cfg, "imp")
    _run(cfg, "imp", 0)
    played = read_jsonl(cs, cs.layout.stage_key(0, "pool", "environments.jsonl"))
    assert sorted(e["file"] for e in played) == ["game_half", "game_locker"]
    locker = next(e for e in played if e["file"] == "game_locker")
    verdict = cs.store.read_json(
        cs.layout.stage_key(0, "pool", f"verdicts/{locker['env_id']}.json")
    )
    assert verdict["accepted"] and any(c.get("waived") for c in verdict["checks"])
    agent = cs.store.read_json(cs.layout.stage_key(0, "train_agent", "outcome.json"))
    assert agent["samples"] > 0 and "skipped" not in agent, agent
    row = summarize_round(cs, 0)
    assert (row["attempts"], row["pool_envs"], row["weights"]) == (0, 2, "r0000-agent")

    # export: the reference's layout, checksums that `sha256sum -c` accepts, a dataset
    out = tmp_path / "exported"
    where = ["--store", cfg.storage.root, "--out", str(out)]
    done = CliRunner().invoke(app, ["pool", "export", "imp", *where])
    assert done.exit_code == 0, done.output
    assert "2 environments of campaign imp (rounds 0) written to" in done.output
    again = CliRunner().invoke(app, ["pool", "export", "imp", *where])
    assert again.exit_code == 2 and "is not empty" in again.output
    check = subprocess.run(["sha256sum", "-c", "checksums.sha256"], cwd=out, capture_output=True)
    assert check.returncode == 0 and check.stdout.decode().count(": OK") == 2
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    by_name = {m["name"]: m for m in manifest}
    assert set(by_name) == {"game_half", "game_locker"}
    half = by_name["game_half"]
    assert half["win_rate"] == 0.5 and half["regret"] is not None and half["source"] == "pool"
    assert half["skill"] == "spatial_reasoning" and half["verdict"]["accepted"]
    assert half["scores"] == [
        {"round": 0} | {k: half[k] for k in ("win_rate", "hinted_win_rate", "regret")}
    ]

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets

    hub = datasets.load_dataset(str(out), split="train")
    saved = datasets.load_from_disk(str(out / "hf"))
    for ds in (hub, saved):
        assert sorted(ds["name"]) == ["game_half", "game_locker"]
        assert {r["sha256"]: r["code"] for r in ds} == {
            hashlib.sha256(c.encode()).hexdigest(): c for c in (envs["game_half"], FIXED_LOCKER)
        }
        assert {r["name"]: r["win_rate"] for r in ds}["game_half"] == 0.5

    # import(export(campaign)): the same sources and sha256s, from each layout
    first = {e.sha256: code for e, code in read_pool(store, "ref")}
    for name, where in (("back", out), ("back-hf", out / "hf"), ("back-hub", out / "data")):
        again = import_pool(str(where), store, name, policy=policy, config=waive)
        assert (again.accepted, again.rejected) == (2, 0), (where, again.rejections)
        back = read_pool(store, name)
        assert {e.sha256: code for e, code in back} == first, where
        assert all(isinstance(e.meta["win_rate"], float) for e, _ in back)  # exported scores
