"""The environment pool (``spade.pipeline.pool``): which files, never a held-out one, how many
a round takes and in which seeded order. (The pool stage inside a round: tests/flows.)"""

from __future__ import annotations

import shutil

import pytest

from spade.config import load_config
from spade.designer.designer import env_id_for
from spade.envs.examples import example_paths
from spade.errors import ConfigError
from spade.pipeline.pool import (
    PoolEnv,
    candidates,
    check_not_held_out,
    draw,
    pool_envs,
    take,
    wanted,
)
from spade.pipeline.replay import RoundPlan
from spade.records import CheckResult, Verdict

EXAMPLES = {p.stem: p for p in example_paths()}
DEMO_HELDOUT = ["code_breaker", "maze_walk", "sequence_oracle"]


def _cfg(**overrides: object):
    return load_config(overrides=overrides)


def _heldout(*names: str) -> list[str]:
    return [str(EXAMPLES[n]) for n in names]


def test_default_pool_is_the_bundled_examples_minus_the_held_out():
    pool = pool_envs(_cfg(**{"run.heldout_envs": _heldout(*DEMO_HELDOUT)}))
    assert [p.name for p in pool] == sorted(set(EXAMPLES) - set(DEMO_HELDOUT))
    assert len(pool) == len(EXAMPLES) - 3
    first = pool[0]
    assert first.code == EXAMPLES[first.name].read_text() and first.env_id == env_id_for(first.code)
    assert first.skill == "error_recovery" and first.hint  # bank_transfer declares both


def test_a_held_out_folder_leaves_nothing_and_says_so():
    folder = str(example_paths()[0].parent)
    with pytest.raises(ConfigError, match="not held out"):
        pool_envs(_cfg(**{"run.heldout_envs": [folder]}))


def test_a_held_out_environment_copied_into_the_pool_is_left_out(tmp_path):
    """Matched by code too: the same environment under another name is still held out."""
    shutil.copy(EXAMPLES["maze_walk"], tmp_path / "renamed_maze.py")
    shutil.copy(EXAMPLES["switchboard"], tmp_path / "switchboard.py")
    (tmp_path / "_helper.py").write_text("x = 1\n")  # private files are not environments
    cfg = _cfg(**{"run.env_pool": str(tmp_path), "run.heldout_envs": _heldout("maze_walk")})
    assert [p.name for p in pool_envs(cfg)] == ["switchboard"]


def test_check_not_held_out_fails_loudly():
    env = PoolEnv("maze_walk", "code", "env-1", "spatial_reasoning", None)
    check_not_held_out([env], {"env-2"})
    with pytest.raises(RuntimeError, match="held-out environments in the training pool"):
        check_not_held_out([env], {"env-1"})


def test_a_missing_pool_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"run\.env_pool"):
        pool_envs(_cfg(**{"run.env_pool": str(tmp_path / "nowhere")}))


def test_one_file_is_a_pool(tmp_path):
    cfg = _cfg(**{"run.env_pool": str(EXAMPLES["switchboard"])})
    assert [p.name for p in pool_envs(cfg)] == ["switchboard"]


def test_a_list_of_files_and_folders_is_a_pool_in_its_order(tmp_path):
    shutil.copy(EXAMPLES["maze_walk"], tmp_path / "maze_walk.py")
    shutil.copy(EXAMPLES["switchboard"], tmp_path / "board_copy.py")  # the same code again
    listed = [str(EXAMPLES["switchboard"]), str(tmp_path), str(EXAMPLES["switchboard"])]
    cfg = _cfg(**{"run.env_pool": listed})
    assert [p.name for p in pool_envs(cfg)] == ["switchboard", "maze_walk"]
    held = _cfg(**{"run.env_pool": listed, "run.heldout_envs": _heldout("switchboard")})
    assert [p.name for p in pool_envs(held)] == ["maze_walk"]
    with pytest.raises(ConfigError, match="nowhere"):
        pool_envs(_cfg(**{"run.env_pool": [*listed, str(tmp_path / "nowhere")]}))


def _env(name: str, code: str | None = None) -> PoolEnv:
    code = code or f"# {name}\n"
    return PoolEnv(name, code, env_id_for(code), "s", None)


def test_draw_is_seeded_round_dependent_and_never_repeats():
    pool = [_env(f"e{i}") for i in range(8)]
    first = draw(pool, seed=0, regeneration=0, exclude=set())
    assert draw(pool, seed=0, regeneration=0, exclude=set()) == first  # seeded
    assert sorted(e.name for e in first) == sorted(e.name for e in pool)  # a permutation
    orders = {tuple(e.name for e in draw(pool, 0, r, set())) for r in range(6)}
    assert len(orders) > 1  # the regeneration changes the draw
    assert [e.name for e in draw(pool, 1, 0, set())] != [e.name for e in first]  # so does seed
    twin = _env("twin", pool[3].code)  # same code, another file: one environment
    drawn = draw([*pool, twin], 0, 0, exclude={pool[5].env_id})
    assert len({e.env_id for e in drawn}) == len(drawn) == 7
    assert pool[5].env_id not in {e.env_id for e in drawn}


def test_how_many_pool_environments_a_round_takes():
    assert wanted(_cfg(), accepted=0) == (
        0,
        "run.min_envs and run.pool_envs_min are 0: only designs are played",
    )
    fill = _cfg(**{"run.min_envs": 3})
    assert wanted(fill, accepted=1) == (2, "")
    assert wanted(fill, accepted=3)[0] == wanted(fill, accepted=5)[0] == 0
    assert "3 designs accepted" in wanted(fill, accepted=3)[1]
    pool = _cfg(**{"run.env_source": "pool", "designer.envs_per_round": 5})
    assert wanted(pool, accepted=0) == (5, "")  # as many as a designed round would play
    beside = _cfg(**{"run.min_envs": 3, "run.pool_envs_min": 1})
    assert [wanted(beside, accepted=n)[0] for n in (0, 1, 2, 3, 4, 9)] == [3, 2, 1, 1, 1, 1]
    only = _cfg(**{"run.pool_envs_min": 2})  # without min_envs: two beside any designs
    assert [wanted(only, accepted=n)[0] for n in (0, 5)] == [2, 2] and only.run.draws_pool()
    assert not _cfg().run.draws_pool()


def test_candidates_leave_out_the_rounds_designs():
    cfg = _cfg(**{"run.min_envs": 2, "run.heldout_envs": _heldout(*DEMO_HELDOUT)})
    switchboard = EXAMPLES["switchboard"].read_text()
    need, found, why = candidates(cfg, RoundPlan(3), [env_id_for(switchboard)])
    assert (need, why) == (1, "")  # one design accepted, min_envs 2
    left = set(EXAMPLES) - set(DEMO_HELDOUT) - {"switchboard"}
    assert {e.name for e in found} == left and len(found) == len(left)
    assert candidates(cfg, RoundPlan(3), ["a", "b"]) == (
        0,
        [],
        "2 designs accepted (run.min_envs 2)",
    )


def test_take_keeps_the_draw_order_and_the_rejected():
    from spade.records import Failure, FailureKind

    ok = Verdict(checks=[CheckResult("parse", True, "ok")])
    bad = Verdict(
        checks=[CheckResult("parse", False, "no")], failure=Failure(FailureKind.SYNTAX, "no")
    )
    envs = [_env(n) for n in "abcd"]
    chosen, rejected = take(2, envs, [bad, ok, ok, ok])
    assert [e.name for e, _ in chosen] == ["b", "c"] and [e.name for e, _ in rejected] == ["a"]


def test_pool_settings_are_typed():
    with pytest.raises(ConfigError, match="env_source"):
        _cfg(**{"run.env_source": "both"})
    with pytest.raises(ConfigError, match="min_envs"):
        _cfg(**{"run.min_envs": -1})


def _stored_pool(root, name: str, stems: list[str], waived: list[str] | None = None) -> None:
    """A stored pool as `spade pool import` leaves one (here without verifying: the round
    verifies pool environments itself)."""
    from spade.curriculum.stored import StoredEnv, index_bytes, pool_key
    from spade.storage import ObjectStore

    store = ObjectStore(str(root))
    envs = []
    for stem in stems:
        code = EXAMPLES[stem].read_text()
        digest = store.put_blob(code.encode())
        envs.append(
            StoredEnv(f"game_{stem}", digest, env_id_for(code), "s", None, False, waived or [])
        )
    store.write_bytes(pool_key(name, "environments.jsonl"), index_bytes(envs))


def test_a_stored_pool_is_named_pool_colon_name_with_files_and_held_out_ones_left_out(tmp_path):
    from spade.pipeline.pool import pool_digest_of

    _stored_pool(tmp_path, "ref", ["switchboard", "maze_walk"], waived=["seed_dependence"])
    base = {"storage.root": str(tmp_path)}
    cfg = _cfg(**base, **{"run.env_pool": ["pool:ref", str(EXAMPLES["number_hunt"])]})
    pool = pool_envs(cfg)
    assert [(p.name, p.waive) for p in pool] == [
        ("game_switchboard", ("seed_dependence",)),
        ("game_maze_walk", ("seed_dependence",)),
        ("number_hunt", ()),
    ]
    assert pool[0].code == EXAMPLES["switchboard"].read_text() and pool[0].skill == "s"
    held = _cfg(**base, **{"run.env_pool": "pool:ref", "run.heldout_envs": _heldout("maze_walk")})
    assert [p.name for p in pool_envs(held)] == ["game_switchboard"]
    # the cache key's digest follows the stored pool's index
    before = pool_digest_of(cfg)
    _stored_pool(tmp_path, "ref", ["switchboard"])
    assert pool_digest_of(cfg) != before
    with pytest.raises(ConfigError, match="no environment pool 'other' in file://"):
        pool_envs(_cfg(**base, **{"run.env_pool": "pool:other"}))
    with pytest.raises(ConfigError, match="a pool name is"):
        _cfg(**{"run.env_pool": "pool:../x"})
    with pytest.raises(ConfigError, match="a pool name is"):
        _cfg(**{"memory.seed_pool": "pool:"})
