"""The edit strategy (spade.designer.strategies.edit): a parent from the memory shown whole,
no parent no edit, and an answer that rewrote only the class inheriting the parent's names."""

from __future__ import annotations

from spade.config import load_config
from spade.curriculum.memory import EnvironmentMemory
from spade.curriculum.pool import seed_records
from spade.designer.strategies.edit import EDIT
from spade.records import DesignAttempt, env_id_for
from tests.designer.strategies.slots import DOC, MATH, fresh, slot_of
from tests.designer.test_design_batch import (
    CODE_BREAKER,
    EXAMPLES,
    FORMAT,
    NO_CODE,
    _quadratic_probe,
    fenced,
)

PROBE = (EXAMPLES / "polynomial_probe.py").read_text()


def _memory(cfg) -> EnvironmentMemory:
    memory = EnvironmentMemory(cfg.memory)
    memory.extend(seed_records(cfg))  # the bundled examples
    return memory


def _edit_of_probe() -> DesignAttempt:
    att = fresh()
    att.strategy, att.parent_id = "edit", "polynomial_probe"
    att.references = [*FORMAT, {"name": "polynomial_probe", "code": PROBE}]
    return att


def test_the_prompt_holds_the_parent_whole_and_the_parent_is_a_reference():
    cfg = load_config(overrides={"designer.strategy": "edit"})
    att = fresh()
    assert EDIT.prepare(att, slot_of(cfg, _memory(cfg)))
    prompt = att.messages[1]["content"]
    assert (att.strategy, att.parent_id) == ("edit", "polynomial_probe")  # the skill's own
    assert f"```python\n{PROBE}\n```" in prompt and "Turn it into a NEW environment" in prompt
    assert f"<document>\n{DOC}\n</document>" in prompt and f'skill = "{MATH}"' in prompt
    assert "(_QUERY, _INT): keep those" in prompt
    assert att.references == [*FORMAT, {"name": "polynomial_probe", "code": PROBE}]
    assert (att.prefill, att.stop) == ("", [])


def test_without_a_parent_it_declines_and_leaves_the_attempt_alone():
    cfg = load_config(overrides={"designer.strategy": "edit"})
    att = fresh()
    assert not EDIT.prepare(att, slot_of(cfg, EnvironmentMemory(cfg.memory)))
    assert att == fresh()  # the designer writes the slot instead


def test_an_answer_that_rewrote_only_the_class_inherits_the_parents_names():
    att = _edit_of_probe()
    EDIT.take_code(att, fenced(_quadratic_probe()))
    assert att.inherited == ["re", "TextEnv", "_QUERY", "_INT"]
    assert att.code is not None and att.env_id == env_id_for(att.code)
    assert "# carried over from polynomial_probe, whose class this edits" in att.code
    assert att.code.endswith(_quadratic_probe())


def test_a_whole_module_inherits_nothing_and_no_module_is_a_parse_failure():
    att = _edit_of_probe()
    EDIT.take_code(att, fenced(CODE_BREAKER))
    assert att.code == CODE_BREAKER and att.inherited == []
    again = _edit_of_probe()
    EDIT.take_code(again, NO_CODE)
    assert again.code is None and again.failure_kind == "parse"


def test_a_repair_asks_for_the_whole_corrected_module():
    att = _edit_of_probe()
    att.failure_kind, att.failure_reason = "parse", "no code block"
    assert EDIT.repairable(att) and EDIT.whole_answer
    assert "the whole corrected module" in EDIT.repair_feedback(att)
