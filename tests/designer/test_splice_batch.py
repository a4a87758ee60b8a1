"""The splice strategy through design_batch against the OpenAI stand-in: the prefilled request,
the spliced design verified in the jail, and several samples per slot."""

from __future__ import annotations

import pytest

from spade.curriculum.memory import EnvironmentMemory
from spade.curriculum.pool import seed_records
from spade.designer.skills import SKILL_DESCRIPTIONS
from tests.designer.test_design_batch import Script, config, corpus, run, serve
from tests.designer.test_splice import WORD_ANSWER

pytestmark = pytest.mark.sandbox
__all__ = ["corpus"]  # the fixture, shared with test_design_batch

NUMBER_HUNT_PATH = "spade/envs/examples/number_hunt.py"
SETUP_RETURNS_INT = "        return 1\n\n    def play(self, move):\n        return 'x', 0.0, True\n"


def _every_skill(answers: list[str]) -> dict[str, list[str]]:
    return {skill: answers for skill in SKILL_DESCRIPTIONS}


def _memory(cfg) -> EnvironmentMemory:
    memory = EnvironmentMemory(cfg.memory)
    memory.extend(seed_records(cfg))
    return memory


def _cfg(server, corpus, **designer):
    """A splice of number_hunt; the scripted answers rewrite all three hooks (the hidden-state
    directive) unless ``directives`` says otherwise."""
    extra = {"memory.seed_pool": NUMBER_HUNT_PATH}
    designer.setdefault("directives", ["hidden_state"])
    return config(server, corpus, extra, strategy="splice", **designer)


def test_a_splice_is_asked_with_a_prefill_and_its_methods_are_spliced(corpus):
    with serve(Script(_every_skill([WORD_ANSWER]))) as server:
        cfg = _cfg(server, corpus, attempts_per_slot=1)
        (att,) = run(cfg, _memory(cfg))
        (request,) = [r for r in server.chat_requests if "Target skill" in str(r["messages"])]
    prefill = request["messages"][-1]
    assert prefill["role"] == "assistant" and prefill["content"] == att.prefill
    assert att.prefill.endswith("    def setup(self) -> str:\n")
    assert request["continue_final_message"] is True
    assert "```" in request["stop"] and "\n    def __init__(" in request["stop"]
    assert att.strategy == "splice" and att.directive and att.parent_id
    assert att.spliced == ["setup", "play", "solution"]
    assert att.accepted, att.verdict
    assert att.code is not None and "self.word = self.rng.choice(words)" in att.code
    assert att.class_name is not None and f"class {att.class_name}(TextEnv)" in att.code
    assert att.completion == WORD_ANSWER  # the sampled part only: the prefill is prompt


def test_samples_of_a_slot_are_all_verified_and_an_accepted_one_closes_it(corpus):
    with serve(Script(_every_skill([SETUP_RETURNS_INT, WORD_ANSWER]))) as server:
        cfg = _cfg(server, corpus, attempts_per_slot=2, samples_per_slot=2)
        attempts = run(cfg, _memory(cfg))
    assert sorted(a.sample for a in attempts) == [0, 1]  # one attempt: the slot closed
    assert {a.attempt for a in attempts} == {0}
    assert sorted(a.accepted for a in attempts) == [False, True]
    (rejected,) = [a for a in attempts if not a.accepted]
    assert rejected.failure_kind is not None and rejected.code is not None


def test_a_splice_repair_splices_the_repairs_answer(corpus):
    """A splice whose first answer is refused (its setup returns an int) is repaired with an
    answer that writes the methods well: the attempt's code is the repair's methods spliced
    into the parent (before, the first answer was spliced again and its verdict kept: every
    splice repair was a wasted request)."""
    script = Script(_every_skill([SETUP_RETURNS_INT]), repairs=_every_skill([WORD_ANSWER]))
    with serve(script) as server:
        cfg = _cfg(server, corpus, attempts_per_slot=1, repair_turns=1, followups=0)
        (att,) = run(cfg, _memory(cfg))
    assert att.repairs == 1 and att.first_failure_kind is not None
    assert att.first_code is not None and "return 1" in att.first_code
    assert att.accepted and att.accepted_after_repair, att.verdict
    assert att.code is not None and "self.word = self.rng.choice(words)" in att.code
    assert att.completion == SETUP_RETURNS_INT  # the first answer stays what was sampled first
