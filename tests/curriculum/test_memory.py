"""The environment memory: FIFO bound, persistence and prompt examples."""

import json
import random

import pytest

from spade.config import DesignerConfig, MemoryConfig
from spade.curriculum.memory import EnvironmentMemory, MemoryRecord, negative_label


def rec(env_id: str, skill: str = "logic", win=0.5, regret=0.0, **kw) -> MemoryRecord:
    return MemoryRecord(env_id, skill, code_head=f"# {env_id}", win_rate=win, regret=regret, **kw)


def memory_of(*records: MemoryRecord, capacity: int = 200) -> EnvironmentMemory:
    memory = EnvironmentMemory(MemoryConfig(capacity=capacity))
    memory.extend(records)
    return memory


def ids(records) -> list[str]:
    return [r.env_id for r in records]


# ----------------------------------------------------------------------- storage and FIFO


def test_fifo_drops_the_oldest():
    memory = memory_of(*(rec(f"e{i}") for i in range(5)), capacity=3)
    assert len(memory) == 3
    assert ids(memory.records()) == ["e2", "e3", "e4"]


def test_add_cuts_the_code_head():
    memory = EnvironmentMemory(MemoryConfig(code_head_chars=100))
    memory.add(MemoryRecord("e", "logic", code_head="x" * 250))
    assert memory.records()[0].code_head == "x" * 100


def test_record_checks_its_win_rate():
    with pytest.raises(ValueError, match="win_rate must be in"):
        rec("e", win=1.2)


def test_state_dict_round_trips_through_json():
    memory = memory_of(
        rec("a", win=0.5, regret=0.25, round=3, hint="think"),
        MemoryRecord("b", "maths", "code", win_rate=None, regret=None, accepted=False),
    )
    restored = EnvironmentMemory(MemoryConfig())
    restored.load_state_dict(json.loads(json.dumps(memory.state_dict())))
    assert restored.records() == memory.records()


def test_load_keeps_the_newest_within_capacity():
    big = memory_of(*(rec(f"e{i}") for i in range(5)))
    small = EnvironmentMemory(MemoryConfig(capacity=2))
    small.add(rec("old"))
    small.load_state_dict(big.state_dict())  # replaces, does not append
    assert ids(small.records()) == ["e3", "e4"]


def test_load_rejects_bad_state():
    memory = EnvironmentMemory(MemoryConfig())
    with pytest.raises(ValueError, match="version"):
        memory.load_state_dict({"version": 99, "records": []})
    with pytest.raises(ValueError, match="'records' list"):
        memory.load_state_dict({"version": 1})
    with pytest.raises(ValueError, match="unknown fields"):
        memory.load_state_dict({"version": 1, "records": [{"env_id": "a", "colour": 1}]})
    with pytest.raises(ValueError, match="bad memory record 'a'"):
        memory.load_state_dict({"version": 1, "records": [{"env_id": "a"}]})


# ---------------------------------------------------------------------------- positives


def test_positives_band_is_inclusive_and_same_skill_only():
    memory = memory_of(
        rec("lo_edge", win=0.15),
        rec("hi_edge", win=0.85),
        rec("below", win=0.14),
        rec("above", win=0.86),
        rec("other_skill", skill="maths", win=0.5),
        rec("unplayed", win=None),
        rec("rejected", win=0.5, accepted=False),
    )
    designer = DesignerConfig(positives=5)
    positives, _ = memory.examples_for("logic", random.Random(0), designer)
    assert set(ids(positives)) == {"lo_edge", "hi_edge"}


def test_positives_come_from_the_top_two_k_by_regret():
    # k = 2: candidates are the top 4 by regret (r5..r2); r1 (lowest) is never drawn
    memory = memory_of(*(rec(f"r{i}", regret=i / 10) for i in range(1, 6)))
    designer = DesignerConfig(positives=2)
    seen: set[str] = set()
    for seed in range(50):
        positives, _ = memory.examples_for("logic", random.Random(seed), designer)
        assert len(positives) == 2
        regrets = [r.regret for r in positives]
        assert regrets == sorted(regrets, reverse=True)  # returned highest first
        seen |= set(ids(positives))
    assert seen == {"r2", "r3", "r4", "r5"}


def test_positives_are_deterministic_under_the_rng():
    memory = memory_of(*(rec(f"r{i}", regret=i / 10) for i in range(1, 6)))
    designer = DesignerConfig(positives=2)
    first = memory.examples_for("logic", random.Random(7), designer)
    assert memory.examples_for("logic", random.Random(7), designer) == first


def test_fewer_positives_than_asked_returns_all_of_them():
    memory = memory_of(rec("a", regret=0.1), rec("b", regret=0.3))
    positives, _ = memory.examples_for("logic", random.Random(0), DesignerConfig(positives=5))
    assert ids(positives) == ["b", "a"]


def test_regret_ties_prefer_the_newest():
    # k = 1 -> 2 candidates from 3 equal regrets: the two newest (c, b)
    memory = memory_of(rec("a", regret=0.2), rec("b", regret=0.2), rec("c", regret=0.2))
    designer = DesignerConfig(positives=1)
    drawn = {ids(memory.examples_for("logic", random.Random(s), designer)[0])[0] for s in range(30)}
    assert drawn == {"b", "c"}


def test_zero_examples_asked():
    memory = memory_of(rec("a"), rec("easy", win=1.0))
    designer = DesignerConfig(positives=0, negatives=0)
    assert memory.examples_for("logic", random.Random(0), designer) == ([], [])


def test_empty_memory_has_no_examples():
    memory = EnvironmentMemory(MemoryConfig())
    assert memory.examples_for("logic", random.Random(0), DesignerConfig()) == ([], [])


# ---------------------------------------------------------------------------- negatives


def test_negatives_thresholds_are_strict():
    # 0.9 and 0.1 are neither too easy (> 0.9) nor too hard (< 0.1)
    memory = memory_of(rec("at_easy", win=0.9), rec("at_hard", win=0.1), rec("mid", win=0.5))
    _, negatives = memory.examples_for("logic", random.Random(0), DesignerConfig(negatives=3))
    assert negatives == []


def test_negatives_prefer_the_same_skill():
    memory = memory_of(
        rec("other_easy", skill="maths", win=1.0),
        rec("same_hard", win=0.0),
        rec("other_hard", skill="maths", win=0.05),
    )
    designer = DesignerConfig(negatives=1)
    for seed in range(20):
        _, negatives = memory.examples_for("logic", random.Random(seed), designer)
        assert ids(negatives) == ["same_hard"]


def test_negatives_fill_up_from_other_skills():
    memory = memory_of(rec("same", win=0.95), rec("o1", skill="maths", win=0.0))
    _, negatives = memory.examples_for("logic", random.Random(0), DesignerConfig(negatives=2))
    assert ids(negatives) == ["same", "o1"]  # same skill first


def test_negatives_skip_unplayed_and_rejected():
    memory = memory_of(rec("unplayed", win=None), rec("rejected", win=1.0, accepted=False))
    _, negatives = memory.examples_for("logic", random.Random(0), DesignerConfig(negatives=2))
    assert negatives == []


def test_negative_label():
    designer = DesignerConfig()
    assert negative_label(rec("e", win=0.95), designer) == "too easy"
    assert negative_label(rec("h", win=0.05), designer) == "too hard"
    with pytest.raises(ValueError, match="not a negative"):
        negative_label(rec("m", win=0.5), designer)
    with pytest.raises(ValueError, match="not a negative"):
        negative_label(rec("n", win=None), designer)
