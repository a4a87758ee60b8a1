"""The environment memory: FIFO bound, persistence and prompt examples."""

import json
import random
from dataclasses import asdict

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


def test_a_remeasured_environment_replaces_its_record_and_moves_to_the_newest():
    # a replay round scores the same environments again: one record each, the newest numbers
    memory = memory_of(rec("a", win=0.2), rec("b"), rec("c"), capacity=3)
    memory.add(rec("a", win=0.7, round=1))
    assert ids(memory.records()) == ["b", "c", "a"]
    assert memory.records()[-1].win_rate == 0.7 and memory.records()[-1].round == 1
    memory.add(rec("d"))  # the FIFO bound still holds, oldest first
    assert ids(memory.records()) == ["c", "a", "d"]


def test_fifo_drops_the_oldest():
    memory = memory_of(*(rec(f"e{i}") for i in range(5)), capacity=3)
    assert len(memory) == 3
    assert ids(memory.records()) == ["e2", "e3", "e4"]


def test_add_cuts_the_code_head_and_marks_it_cut():
    memory = EnvironmentMemory(MemoryConfig(code_head_chars=100))
    memory.add(MemoryRecord("e", "logic", code_head="x" * 250))
    memory.add(MemoryRecord("f", "logic", code_head="y" * 100))
    cut, whole = memory.records()
    assert cut.code_head == "x" * 100 and cut.code_chars == 250 and cut.whole_code is None
    assert whole.code_chars == 100 and whole.whole_code == "y" * 100


def test_a_cut_design_is_never_shown_and_a_version_1_state_still_loads():
    memory = EnvironmentMemory(MemoryConfig(code_head_chars=100))
    memory.add(rec("whole", win=None))
    memory.add(MemoryRecord("cut", "logic", code_head="x" * 250, round=-1))
    positives, _ = memory.examples_for("logic", random.Random(0), DesignerConfig(positives=5))
    assert ids(positives) == ["whole"]  # the cut one is skipped
    restored = EnvironmentMemory(MemoryConfig())
    restored.load_state_dict({"version": 1, "records": _v1(rec("old", win=None))})
    (record,) = restored.records()
    assert record.code_head == "# old" and record.code_chars is None  # not taken as whole
    assert restored.examples_for("logic", random.Random(0), DesignerConfig()) == ([], [])
    restored.load_state_dict(json.loads(json.dumps(memory.state_dict())))  # version 2
    assert restored.records() == memory.records()


def _v1(*records: MemoryRecord) -> list[dict]:
    """Records as a version-1 state held them (no code_chars)."""
    return [{k: v for k, v in asdict(r).items() if k != "code_chars"} for r in records]


def test_examples_over_the_budget_are_skipped_not_cut():
    small, large = (
        MemoryRecord("small", "logic", "s" * 300),
        MemoryRecord("large", "logic", "l" * 301),
    )
    memory = memory_of(small, large)
    positives, _ = memory.examples_for(
        "logic", random.Random(0), DesignerConfig(max_example_chars=300)
    )
    assert ids(positives) == ["small"] and positives[0].code_head == "s" * 300
    both, _ = memory.examples_for("logic", random.Random(0), DesignerConfig(max_example_chars=301))
    assert sorted(ids(both)) == ["large", "small"]


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
    assert set(ids(positives[:2])) == {"lo_edge", "hi_edge"}
    assert ids(positives[2:]) == ["unplayed"]  # unscored: only fills a free slot, last


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


# ------------------------------------------------------------------ unscored (seeded) records


def seeded(env_id: str, skill: str = "logic", **kw) -> MemoryRecord:
    return MemoryRecord(env_id, skill, code_head=f"# {env_id}", round=-1, **kw)


def test_unscored_records_fill_empty_positive_slots():
    memory = memory_of(seeded("s1"), seeded("s2"), seeded("other", skill="maths"))
    positives, negatives = memory.examples_for("logic", random.Random(0), DesignerConfig())
    assert sorted(ids(positives)) == ["s1", "s2"] and negatives == []


def test_scored_positives_come_first_and_take_precedence():
    memory = memory_of(seeded("s1"), seeded("s2"), rec("played", regret=0.3))
    designer = DesignerConfig(positives=2)
    for seed in range(20):
        positives, _ = memory.examples_for("logic", random.Random(seed), designer)
        assert ids(positives)[0] == "played" and ids(positives)[1] in {"s1", "s2"}
    full = memory_of(seeded("s1"), rec("p1", regret=0.1), rec("p2", regret=0.2))
    positives, _ = full.examples_for("logic", random.Random(0), designer)
    assert ids(positives) == ["p2", "p1"]  # no slot left for the seeded design


def test_unscored_records_are_sampled_with_the_rng():
    memory = memory_of(*(seeded(f"s{i}") for i in range(6)))
    designer = DesignerConfig(positives=2)
    draws = {
        tuple(ids(memory.examples_for("logic", random.Random(seed), designer)[0]))
        for seed in range(30)
    }
    assert len(draws) > 1 and all(len(d) == 2 for d in draws)
    first = memory.examples_for("logic", random.Random(3), designer)
    assert memory.examples_for("logic", random.Random(3), designer) == first


def test_unscored_records_never_change_the_scored_draw():
    scored = [rec(f"r{i}", regret=i / 10) for i in range(1, 6)] + [rec("easy", win=1.0)]
    scored += [rec("hard", skill="maths", win=0.0)]
    designer = DesignerConfig(positives=2, negatives=2)
    for seed in range(10):
        plain = memory_of(*scored).examples_for("logic", random.Random(seed), designer)
        mixed = memory_of(seeded("s"), *scored).examples_for("logic", random.Random(seed), designer)
        assert mixed == plain


def test_unscored_records_are_never_negatives_and_rejected_ones_never_examples():
    memory = memory_of(seeded("s1", accepted=False), seeded("s2", skill="maths"))
    designer = DesignerConfig(positives=3, negatives=3)
    assert memory.examples_for("logic", random.Random(0), designer) == ([], [])


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


# ------------------------------------------------------------------------- edit parents

TOOL_CODE = "from spade.envs import ToolUseEnv\n\nclass ShopEnv(ToolUseEnv):\n    pass\n"


def test_parent_prefers_the_same_skill_and_is_seeded():
    logic, maths = "logical_deduction", "mathematical_reasoning"
    memory = memory_of(
        seeded("s1", logic),
        seeded("s2", logic),
        rec("played", logic, regret=0.3),
        seeded("m", maths),
    )
    designer = DesignerConfig()
    seen = {_parent(memory, logic, s, designer) for s in range(30)}
    assert seen == {"s1", "s2", "played"}  # never the other skill's while the skill has one
    assert {_parent(memory, logic, 4, designer) for _ in range(3)} == {
        _parent(memory, logic, 4, designer)
    }


def _parent(
    memory: EnvironmentMemory, skill: str, seed: int, designer: DesignerConfig
) -> str | None:
    parent = memory.parent_for(skill, random.Random(seed), designer)
    return None if parent is None else parent.env_id


def test_parent_falls_back_to_the_modes_other_skills_never_negatives_or_cut_ones():
    easy, hard = rec("easy", "optimization", win=0.95), rec("hard", "optimization", win=0.05)
    fits = seeded("fits", "optimization")
    big = MemoryRecord("big", "optimization", "x" * 5000, round=-1)
    tool = seeded("tool", "data_retrieval")
    memory = memory_of(easy, hard, big, tool, fits)
    designer = DesignerConfig(max_example_chars=4000)
    for s in range(20):  # no logical_deduction design: another game skill's, in bounds, fitting
        assert memory.parent_for("logical_deduction", random.Random(s), designer).env_id == "fits"  # type: ignore[union-attr]
    assert (
        memory_of(easy, hard, big, tool).parent_for("logical_deduction", random.Random(0), designer)
        is None
    )


def test_parent_of_a_tool_use_design_is_a_tool_use_environment():
    unknown_tool = MemoryRecord("shop", "unknown", TOOL_CODE, round=-1)
    unknown_game = MemoryRecord("game", "unknown", "class GameEnv(TextEnv):\n    pass\n", round=-1)
    memory = memory_of(unknown_game, unknown_tool, seeded("logic_one", "logical_deduction"))
    tools = DesignerConfig(mode="tool_use")
    assert memory.parent_for("data_retrieval", random.Random(0), tools).env_id == "shop"  # type: ignore[union-attr]
    games = {
        memory.parent_for("optimization", random.Random(s), DesignerConfig()).env_id
        for s in range(20)
    }  # type: ignore[union-attr]
    assert games == {"game", "logic_one"}


def test_a_damaged_stored_memory_is_corrupt_store_data():
    from spade.errors import ObjectCorruptError

    memory = EnvironmentMemory(MemoryConfig())
    for state in (
        {"version": 99, "records": []},
        {"version": 1, "records": [{"env_id": "a", "colour": 1}]},
        {"version": 1, "records": [{**asdict(rec("a")), "win_rate": 7.0}]},
    ):
        with pytest.raises(ObjectCorruptError):
            memory.load_state_dict(state)


# ------------------------------------------------------------------------- barren parents

LOGIC = "logical_deduction"


def _variants(parent: str, *returns: float) -> list[MemoryRecord]:
    """Played designs varying ``parent`` (too hard: never parents themselves)."""
    return [
        rec(f"{parent}-v{i}", LOGIC, win=0.0, mean_return=r, parent_id=parent)
        for i, r in enumerate(returns)
    ]


def test_a_parent_whose_variants_all_scored_0_is_barren():
    memory = memory_of(
        seeded("probe", LOGIC),
        seeded("hunt", LOGIC),
        seeded("unplayed", LOGIC),
        *_variants("probe", 0.0, 0.0),
        *_variants("hunt", 0.0, 0.21),  # one variant's plays got partial credit
        rec("own", LOGIC, win=0.3, mean_return=0.0),  # played itself, never any credit
    )
    assert memory.barren() == {"probe", "own", "probe-v0", "probe-v1", "hunt-v0"}


def test_a_barren_parent_is_drawn_by_its_weight_and_the_draw_is_seeded():
    memory = memory_of(seeded("probe", LOGIC), seeded("hunt", LOGIC), *_variants("probe", 0.0))
    draws = [_parent(memory, LOGIC, s, DesignerConfig()) for s in range(400)]
    # weight 0.25 against 1: a fifth of the draws expected; the seeds make the count exact,
    # the bounds are the binomial's ~4.5 standard deviations (n 400, p 0.2: sd 8)
    assert 44 < draws.count("probe") < 116 and draws.count("hunt") == 400 - draws.count("probe")
    assert draws == [_parent(memory, LOGIC, s, DesignerConfig()) for s in range(400)]
    never = DesignerConfig(barren_parent_weight=0.0)
    assert {_parent(memory, LOGIC, s, never) for s in range(50)} == {"hunt"}
    alone = memory_of(seeded("probe", LOGIC), *_variants("probe", 0.0))
    assert _parent(alone, LOGIC, 0, never) == "probe"  # barren, but the only candidate


def test_without_a_barren_candidate_the_draw_is_the_plain_one():
    memory = memory_of(
        seeded("a", LOGIC), seeded("b", LOGIC), seeded("c", LOGIC), *_variants("b", 0.4)
    )
    newest_first = reversed(memory.records())
    candidates = [r for r in newest_first if r.env_id in ("a", "b", "c")]
    for s in range(20):  # the same draw as rng.choice: seeded campaigns keep their parents
        assert (
            _parent(memory, LOGIC, s, DesignerConfig())
            == random.Random(s).choice(candidates).env_id
        )
