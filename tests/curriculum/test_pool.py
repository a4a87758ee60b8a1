"""Seeding the memory from an environment pool: code is read as text, never run."""

import json
import random
from pathlib import Path

import pytest

from spade.config import DesignerConfig, MemoryConfig
from spade.curriculum.memory import SEED_ROUND, UNKNOWN_SKILL, EnvironmentMemory, read_declarations
from spade.curriculum.pool import import_pool, seed_records
from tests.test_import_light import modules_after

EXAMPLES = Path(__file__).resolve().parents[2] / "spade" / "envs" / "examples"

TRAP = """
import os
os.system("touch {marker}")  # would run on import
raise SystemExit("imported!")

class TrapEnv:
    skill = "optimization"
    hint = ("Pack the densest "
            "items first.")
"""


def test_examples_pool_reads_skills_via_ast():
    records = import_pool(EXAMPLES, MemoryConfig())
    skills = {r.env_id: r.skill for r in records}
    assert skills == {
        "bank_transfer": "error_recovery",
        "cargo_knapsack": "optimization",
        "code_breaker": "logical_deduction",
        "maze_walk": "spatial_reasoning",
        "number_hunt": "mathematical_reasoning",
        "order_fulfillment": "state_modification",
        "ownership_riddle": "logical_deduction",
        "polynomial_probe": "mathematical_reasoning",
        "sequence_oracle": "pattern_recognition",
        "switchboard": "causal_inference",
    }
    assert all(r.round == SEED_ROUND and r.win_rate is None and r.accepted for r in records)
    code = {p.stem: p.read_text() for p in EXAMPLES.glob("*.py")}
    assert all(r.hint and r.whole_code == code[r.env_id] for r in records)  # whole, not cut


def test_pool_code_is_never_executed(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "trap.py").write_text(TRAP.format(marker=marker))
    (records,) = import_pool(tmp_path, MemoryConfig())
    assert not marker.exists()
    assert (records.env_id, records.skill) == ("trap", "optimization")
    assert records.hint == "Pack the densest items first."  # implicit concatenation read


def test_folder_pool_sorted_skips_init_and_cuts_code(tmp_path):
    (tmp_path / "__init__.py").write_text('skill = "nope"\n')
    (tmp_path / "b.py").write_text('skill: str = "maths"\n' + "#" * 300)
    (tmp_path / "a.py").write_text("class AEnv:\n    pass\n")
    records = import_pool(tmp_path, MemoryConfig(code_head_chars=100))
    assert [(r.env_id, r.skill) for r in records] == [("a", UNKNOWN_SKILL), ("b", "maths")]
    assert len(records[1].code_head) == 100 and records[1].code_chars == 21 + 300
    assert records[1].whole_code is None and records[0].whole_code is not None


def test_single_py_file(tmp_path):
    path = tmp_path / "one.py"
    path.write_text('class OneEnv:\n    skill = "causal_inference"\n')
    (record,) = import_pool(str(path), MemoryConfig())
    assert (record.env_id, record.skill) == ("one", "causal_inference")


def test_env_class_wins_over_other_classes():
    code = 'class Helper:\n    skill = "wrong"\n\nclass GameEnv:\n    skill = "right"\n'
    assert read_declarations(code) == {"skill": "right"}


def test_module_level_skill_wins():
    code = 'skill = "module"\n\nclass GameEnv:\n    skill = "class"\n    hint = "h"\n'
    assert read_declarations(code) == {"skill": "module", "hint": "h"}


def test_non_literal_skill_is_ignored():
    assert read_declarations('skill = "a" + "b"\n') == {}


def test_broken_code_falls_back_to_a_regex():
    assert read_declarations('class XEnv:\n    skill = "spatial"\n    def oops(:\n') == {
        "skill": "spatial"
    }


def test_jsonl_pool(tmp_path):
    path = tmp_path / "pool.jsonl"
    lines = [
        {"env_id": "x", "code": 'skill = "from_code"', "win_rate": 0.5, "regret": 0.2},
        {"id": 7, "env_code": "pass", "skill": "maths", "round": 4, "accepted": False},
        {"source": 'class SEnv:\n    skill = "logic"\n    hint = "h"'},
    ]
    path.write_text("\n".join(json.dumps(d) for d in lines) + "\n\n")
    a, b, c = import_pool(path, MemoryConfig())
    assert (a.env_id, a.skill, a.win_rate, a.regret, a.round) == ("x", "from_code", 0.5, 0.2, -1)
    assert (b.env_id, b.skill, b.round, b.accepted, b.code_head) == ("7", "maths", 4, False, "pass")
    assert (c.env_id, c.skill, c.hint) == ("pool.jsonl:3", "logic", "h")


def test_jsonl_skill_field_overrides_code(tmp_path):
    path = tmp_path / "pool.jsonl"
    path.write_text(json.dumps({"code": 'skill = "in_code"', "skill": "in_record"}) + "\n")
    (record,) = import_pool(path, MemoryConfig())
    assert record.skill == "in_record"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"skill": "maths"}', r"pool.jsonl:1: record has no code \(a non-empty code / env_code"),
        ('{"code": ""}', "record has no code"),
        ("[1, 2]", "must be a JSON object, got list"),
        ("{not json", "pool.jsonl:1: not valid JSON"),
        ('{"code": "x", "win_rate": "high"}', "field 'win_rate' has the wrong type"),
        ('{"code": "x", "win_rate": true}', "field 'win_rate' has the wrong type"),
        ('{"code": "x", "win_rate": 2.0}', "pool.jsonl:1: .*win_rate must be in"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path, line, message):
    path = tmp_path / "pool.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=message):
        import_pool(path, MemoryConfig())


def test_missing_pool(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        import_pool(tmp_path / "nowhere", MemoryConfig())


def test_empty_pools_are_errors(tmp_path):
    with pytest.raises(ValueError, match="holds no environments"):
        import_pool(tmp_path, MemoryConfig())
    empty = tmp_path / "pool.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no environments"):
        import_pool(empty, MemoryConfig())


def test_imported_pool_seeds_memory():
    memory = EnvironmentMemory(MemoryConfig(capacity=5))
    memory.extend(import_pool(EXAMPLES, MemoryConfig()))
    assert len(memory) == 5  # FIFO: the last five examples by name
    assert memory.records()[-1].env_id == "switchboard"


@pytest.mark.parametrize(
    ("skill", "expected"),
    [
        ("logical_deduction", {"code_breaker"}),  # ownership_riddle: over the budget
        ("optimization", {"cargo_knapsack"}),
        ("causal_inference", {"switchboard"}),
    ],
)
def test_imported_pool_gives_the_prompt_examples(skill, expected):
    memory = EnvironmentMemory(MemoryConfig())
    memory.extend(import_pool(EXAMPLES, MemoryConfig()))
    positives, negatives = memory.examples_for(skill, random.Random(0), DesignerConfig())
    assert {r.env_id for r in positives} == expected and negatives == []
    code = {p.stem: p.read_text() for p in EXAMPLES.glob("*.py")}
    assert all(r.code_head == code[r.env_id] for r in positives)  # whole


def test_curriculum_import_is_light():
    heavy = {"torch", "prefect", "pydantic", "transformers"}
    assert sorted(heavy & modules_after("import spade.curriculum")) == []


def _cfg(**overrides: object):
    from spade.config import load_config

    return load_config(overrides=overrides)


def test_edit_seeds_the_bundled_examples_less_the_held_out_ones(tmp_path):
    assert seed_records(_cfg()) == []  # write, no pool: an empty memory
    held = ["spade/envs/examples/code_breaker.py", str(tmp_path)]
    copy = tmp_path / "renamed.py"  # the same environment under another name is held out too
    copy.write_text((EXAMPLES / "maze_walk.py").read_text())
    records = seed_records(_cfg(**{"designer.strategy": "edit", "run.heldout_envs": held}))
    all_ids = {p.stem for p in EXAMPLES.glob("*.py")} - {"__init__"}
    assert {r.env_id for r in records} == all_ids - {"code_breaker", "maze_walk"}


def test_a_configured_pool_is_seeded_less_the_held_out_ones(tmp_path):
    (tmp_path / "a.py").write_text("class AEnv:\n    pass\n")
    (tmp_path / "b.py").write_text("class BEnv:\n    pass\n")
    held = tmp_path / "held"
    held.mkdir()
    (held / "same_as_b.py").write_text("class BEnv:\n    pass\n")
    for strategy in ("write", "edit"):
        cfg = _cfg(**{"memory.seed_pool": str(tmp_path), "designer.strategy": strategy,
                      "run.heldout_envs": [str(held)]})  # fmt: skip
        assert [r.env_id for r in seed_records(cfg)] == ["a"]


def test_a_held_out_path_that_does_not_exist_is_an_error_not_a_leak(tmp_path, monkeypatch):
    """A relative held-out path read from another working directory finds nothing: leaving
    nothing out would show the held-out environment to the designer."""
    from spade.config import load_config
    from spade.curriculum.pool import seed_records
    from spade.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    cfg = load_config(
        None,
        {
            "designer.strategy": "edit",
            "run.heldout_envs": ["spade/envs/examples/code_breaker.py"],
        },
    )
    with pytest.raises(ConfigError, match="neither a file nor a folder"):
        seed_records(cfg)


def test_a_bad_seed_pool_is_a_config_error(tmp_path):
    """The pool is the user's input (memory.seed_pool): ConfigError, and ValueError as before."""
    from spade.errors import ConfigError

    bad = tmp_path / "pool.jsonl"
    bad.write_text('{"code": "x", "win_rate": 2.0}\n')
    for path in (tmp_path / "nowhere", bad):
        with pytest.raises(ConfigError):
            import_pool(path, MemoryConfig())


def test_a_stored_pool_seeds_the_memory_with_its_skills_and_scores(tmp_path):
    """memory.seed_pool: pool:<name> (what `spade pool import` stored): the accepted
    environments, with an exported campaign's win rates and regrets when it has them."""
    from spade.curriculum.stored import StoredEnv, index_bytes, pool_key
    from spade.storage import ObjectStore

    store = ObjectStore(str(tmp_path))
    code = (EXAMPLES / "maze_walk.py").read_text()
    digest = store.put_blob(code.encode())
    scored = StoredEnv(
        "game_maze",
        digest,
        "env-x",
        "spatial_reasoning",
        "go left",
        meta={"win_rate": 0.25, "regret": 0.5, "round": "not an int"},
    )
    store.write_bytes(pool_key("ref", "environments.jsonl"), index_bytes([scored]))
    (record,) = import_pool("pool:ref", MemoryConfig(), store)
    assert (record.env_id, record.skill, record.hint) == (
        "game_maze",
        "spatial_reasoning",
        "go left",
    )
    assert (record.win_rate, record.regret, record.round) == (0.25, 0.5, SEED_ROUND)
    assert record.code_head == code
    with pytest.raises(ValueError, match="needs the store"):
        import_pool("pool:ref", MemoryConfig())
    cfg = _cfg(**{"storage.root": str(tmp_path), "memory.seed_pool": "pool:ref"})
    assert [r.env_id for r in seed_records(cfg)] == ["game_maze"]
    held = _cfg(
        **{
            "storage.root": str(tmp_path),
            "memory.seed_pool": "pool:ref",
            "run.heldout_envs": [str(EXAMPLES / "maze_walk.py")],
        }
    )
    assert seed_records(held) == []
