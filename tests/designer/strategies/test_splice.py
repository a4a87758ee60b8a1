"""The splice strategy (spade.designer.strategies.splice): the parent, directive, prefill and
stops it prepares, no splice without a parent that can be spliced, answers (and repairs)
spliced into the parent, follow-ups for what an answer left unwritten, methods asked of a
repair."""

from __future__ import annotations

from spade.config import load_config
from spade.curriculum.memory import EnvironmentMemory, MemoryRecord
from spade.designer.directives import directive_named
from spade.designer.splice import FENCE, class_name_for, plan_splice
from spade.designer.strategies.splice import SPLICE
from spade.inference.base import Backend
from spade.records import DesignAttempt, env_id_for
from tests.designer.strategies.slots import DOC, MATH, fresh, slot_of, with_backend
from tests.designer.test_design_batch import (
    CODE_BREAKER,
    FORMAT,
    Script,
    config,
    corpus,
    fenced,
    serve,
)
from tests.designer.test_followup import SOLUTION_BODY, WITHOUT_SOLUTION
from tests.designer.test_splice import NUMBER_HUNT, WORD_ANSWER
from tests.designer.test_splice_batch import _every_skill

__all__ = ["corpus"]  # the fixture, shared with test_design_batch

HIDDEN_STATE = {"designer.strategy": "splice", "designer.directives": ["hidden_state"]}
NO_SETUP = "from spade.envs import TextEnv\n\n\nclass NoSetupEnv(TextEnv):\n    skill = 'mathematical_reasoning'\n"


def _memory(cfg, code: str = NUMBER_HUNT) -> EnvironmentMemory:
    memory = EnvironmentMemory(cfg.memory)
    memory.extend([MemoryRecord("number_hunt", MATH, code, None, None, round=0)])
    return memory


def _prepared(cfg=None) -> DesignAttempt:
    cfg = cfg or load_config(overrides=HIDDEN_STATE)
    att = fresh()
    assert SPLICE.prepare(att, slot_of(cfg, _memory(cfg)))
    return att


def test_it_prepares_the_parent_the_directive_and_the_prefilled_answer():
    att = _prepared()
    plan = plan_splice(NUMBER_HUNT, directive_named("hidden_state"))
    assert plan is not None
    assert (att.strategy, att.parent_id, att.directive) == ("splice", "number_hunt", "hidden_state")
    assert att.prefill == plan.prefill and att.prefill.endswith("    def setup(self) -> str:\n")
    assert att.stop == list(plan.stop) and "```" in att.stop
    assert att.class_name == class_name_for(DOC, plan.class_name)
    assert att.references == [*FORMAT, {"name": "number_hunt", "code": NUMBER_HUNT}]
    prompt = att.messages[1]["content"]
    assert "by writing the methods setup, play, solution" in prompt and DOC in prompt


def test_without_a_parent_or_with_one_it_cannot_splice_it_declines():
    cfg = load_config(overrides=HIDDEN_STATE)
    att = fresh()
    assert not SPLICE.prepare(att, slot_of(cfg, EnvironmentMemory(cfg.memory)))
    assert not SPLICE.prepare(att, slot_of(cfg, _memory(cfg, NO_SETUP)))
    assert att == fresh()  # the designer writes the slot instead


def test_the_answers_methods_are_spliced_into_the_parent():
    att = _prepared()
    SPLICE.take_code(att, WORD_ANSWER)
    assert att.spliced == ["setup", "play", "solution"]
    assert att.code is not None and att.env_id == env_id_for(att.code)
    assert "self.word = self.rng.choice(words)" in att.code and "def __init__" in att.code
    assert f"class {att.class_name}(TextEnv)" in att.code


def test_a_repair_answer_is_spliced_not_the_first_answer_again():
    att = _prepared()
    att.completion = "        return 1\n"  # the first answer
    SPLICE.take_code(att, WORD_ANSWER)  # the repair's
    assert att.code is not None and "self.word = self.rng.choice(words)" in att.code


def test_without_its_parent_among_the_references_an_answer_is_read_as_a_module():
    att = _prepared()
    att.references = list(FORMAT)
    SPLICE.take_code(att, fenced(CODE_BREAKER))
    assert att.code == CODE_BREAKER and att.spliced == []


def test_a_method_the_answer_left_unwritten_is_asked_in_a_follow_up(corpus):
    with serve(Script(_every_skill([SOLUTION_BODY]))) as server:
        cfg = config(
            server,
            corpus,
            strategy="splice",
            directives=["hidden_state"],
            followups=1,
        )
        att = _prepared(cfg)
        att.completion = WITHOUT_SOLUTION
        SPLICE.take_code(att, WITHOUT_SOLUTION)

        async def complete(backend: Backend) -> None:
            await SPLICE.complete(backend, [att], cfg)

        with_backend(cfg, complete)
        (request,) = server.chat_requests
    assert request["messages"][-1]["content"].endswith("\n\n    def solution(self) -> list[str]:\n")
    assert request["messages"][-1]["content"].startswith(FENCE)
    assert att.spliced == ["setup", "play", "solution"]
    assert [s["text"] for s in att.segments] == [WITHOUT_SOLUTION, SOLUTION_BODY]


def test_a_repair_asks_for_the_corrected_methods():
    att = _prepared()
    att.failure_kind, att.failure_reason = "parse", "no method"
    assert SPLICE.repairable(att) and SPLICE.whole_answer
    turn = SPLICE.repair_feedback(att)
    assert "Answer with the corrected methods" in turn and "module" not in turn.split("\n")[-1]
