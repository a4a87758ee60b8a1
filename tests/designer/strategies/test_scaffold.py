"""The scaffold strategy (spade.designer.strategies.scaffold): the harness's frame as prefill
on the write prompt, each body sampled on its own and assembled into the code, never repaired."""

from __future__ import annotations

import ast

from spade.config import MemoryConfig, load_config
from spade.curriculum.memory import EnvironmentMemory
from spade.curriculum.pool import import_pool
from spade.designer import scaffold
from spade.designer.designer import needs_repair
from spade.designer.skills import SKILL_DESCRIPTIONS
from spade.designer.strategies.scaffold import SCAFFOLD
from spade.inference.base import Backend
from spade.records import env_id_for
from tests.designer.strategies.slots import MATH, fresh, slot_of, with_backend
from tests.designer.test_design_batch import EXAMPLES, FORMAT, Script, config, corpus, serve
from tests.designer.test_scaffold import PLAY, SETUP, SOLUTION

__all__ = ["corpus"]  # the fixture, shared with test_design_batch


def _memory() -> EnvironmentMemory:
    memory = EnvironmentMemory(MemoryConfig())
    memory.extend(import_pool(EXAMPLES, MemoryConfig()))
    return memory


def test_the_frame_is_the_prefill_of_the_write_prompt():
    cfg = load_config(overrides={"designer.strategy": "scaffold"})
    att = fresh()
    assert SCAFFOLD.prepare(att, slot_of(cfg, _memory(), text="Cedar grows slowly."))
    assert (att.strategy, att.class_name, att.parent_id) == ("scaffold", "CedarEnv", None)
    assert att.prefill == scaffold.header("CedarEnv", MATH, tool_use=False)
    assert att.stop == list(scaffold.STOP)
    assert "Good earlier design 1" in att.messages[1]["content"]  # the write prompt's examples
    shown = sorted(r["name"] for r in att.references[len(FORMAT) :])
    assert att.references[: len(FORMAT)] == FORMAT and shown == ["number_hunt", "polynomial_probe"]


def test_a_tool_use_frame_derives_from_tool_use_env():
    cfg = load_config(overrides={"designer.strategy": "scaffold", "designer.mode": "tool_use"})
    att = fresh("api_orchestration")
    SCAFFOLD.prepare(att, slot_of(cfg, EnvironmentMemory(cfg.memory), skill=att.skill))
    assert "(ToolUseEnv):" in att.prefill and att.references == []


def test_each_body_is_sampled_on_its_own_and_the_frame_and_bodies_are_the_code(corpus):
    answers = {skill: [SETUP, PLAY, SOLUTION] for skill in SKILL_DESCRIPTIONS}
    with serve(Script(answers)) as server:
        cfg = config(server, corpus, strategy="scaffold", scaffold_body_tokens=2000)
        att = fresh()
        SCAFFOLD.prepare(att, slot_of(cfg, _memory()))

        async def sample(backend: Backend) -> None:
            await SCAFFOLD.sample(backend, [att], cfg)

        with_backend(cfg, sample)
        starts = [r["messages"][-1]["content"] for r in server.chat_requests]
    assert not SCAFFOLD.whole_answer and len(starts) == 3
    assert [s.rsplit("\n", 2)[-2] for s in starts] == list(scaffold.GAME_HOOKS)
    assert att.code is not None and att.env_id == env_id_for(att.code)
    (cls,) = ast.parse(att.code).body
    assert isinstance(cls, ast.ClassDef) and cls.name == att.class_name
    assert len(att.segments) == 3 and att.segments[0]["text"] == SETUP  # a segment per body
    assert "self.word = " in att.code and "def extra" not in att.code  # cut at the stops


def test_a_rejected_scaffold_is_not_repaired():
    att = fresh()
    att.strategy, att.code, att.failure_kind = "scaffold", "class X: pass\n", "crash"
    att.verdict = {"accepted": False, "failed_check": "loads"}
    assert not SCAFFOLD.repairable(att) and not needs_repair(att)
