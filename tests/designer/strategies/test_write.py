"""The write strategy (spade.designer.strategies.write): the write prompt with the memory's
examples as references, the module taken from an answer, and a repair asking for it whole."""

from __future__ import annotations

from spade.config import MemoryConfig, load_config
from spade.curriculum.memory import EnvironmentMemory
from spade.curriculum.pool import import_pool
from spade.designer.strategies.base import REASON_CHARS
from spade.designer.strategies.write import WRITE
from spade.records import env_id_for
from tests.designer.strategies.slots import DOC, MATH, fresh, slot_of
from tests.designer.test_design_batch import CODE_BREAKER, EXAMPLES, FORMAT, NO_CODE, fenced


def _memory() -> EnvironmentMemory:
    memory = EnvironmentMemory(MemoryConfig())
    memory.extend(import_pool(EXAMPLES, MemoryConfig()))
    return memory


def test_the_prompt_shows_the_skills_examples_and_they_become_references():
    cfg, memory = load_config(), _memory()
    att = fresh()
    assert WRITE.prepare(att, slot_of(cfg, memory))
    prompt = att.messages[1]["content"]
    assert f"Target skill: {MATH}" in prompt and f"<document>\n{DOC}\n</document>" in prompt
    assert "Good earlier design 1" in prompt and "Turn it into a NEW environment" not in prompt
    assert (att.strategy, att.parent_id, att.prefill, att.stop) == ("write", None, "", [])
    assert att.references[: len(FORMAT)] == FORMAT
    shown = att.references[len(FORMAT) :]
    assert sorted(r["name"] for r in shown) == ["number_hunt", "polynomial_probe"]
    assert all(f"```python\n{r['code']}\n```" in prompt for r in shown)  # shown whole


def test_the_examples_are_drawn_with_the_slots_seed():
    cfg, memory = load_config(), _memory()
    one, again = fresh(), fresh()
    WRITE.prepare(one, slot_of(cfg, memory, seed="s"))
    WRITE.prepare(again, slot_of(cfg, memory, seed="s"))
    assert one.messages == again.messages and one.references == again.references


def test_the_module_in_an_answer_is_the_code():
    att = fresh()
    WRITE.take_code(att, fenced(CODE_BREAKER))
    assert att.code == CODE_BREAKER and att.env_id == env_id_for(CODE_BREAKER)
    assert att.failure_kind is None and att.inherited == []


def test_an_answer_without_a_module_is_a_parse_failure():
    att = fresh()
    WRITE.take_code(att, NO_CODE)
    assert att.code is None and att.env_id is None and att.failure_kind == "parse"


def test_a_repair_asks_for_the_whole_corrected_module():
    att = fresh()
    att.code, att.failure_kind, att.failure_reason = CODE_BREAKER, "infeasible", "x" * 900
    att.verdict = {"failed_check": "solution_wins", "traceback": "Traceback: boom"}
    assert WRITE.repairable(att) and WRITE.whole_answer
    turn = WRITE.repair_feedback(att)
    assert "rejected by the check `solution_wins` (infeasible)" in turn
    assert "x" * REASON_CHARS in turn and "x" * (REASON_CHARS + 1) not in turn
    assert "Traceback: boom" in turn and "the whole corrected module" in turn
    att.code, att.failure_kind, att.failure_reason = None, "parse", "no code block"
    assert "could not be used (parse): no code block" in WRITE.repair_feedback(att)
