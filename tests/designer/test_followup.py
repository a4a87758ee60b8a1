"""Follow-ups of a splice (spade.designer.followup): what an answer left unwritten is asked for,
prefilled with the answer so far and the method's signature, spliced, and trained as segments."""

from __future__ import annotations

import pytest

from spade.designer.followup import followup_prefill, next_signature
from spade.designer.splice import FENCE, plan_splice, splice
from spade.records import DesignAttempt
from spade.training.samples import samples_from_design_attempts
from spade.verify.gate import unwritten_methods
from tests.designer.test_design_batch import Script, corpus, run, serve
from tests.designer.test_splice import NUMBER_HUNT
from tests.designer.test_splice_batch import _cfg, _every_skill, _memory

__all__ = ["corpus"]  # the fixture, shared with test_design_batch

# setup and play of a word game whose play calls a helper it never wrote; no solution (the
# parent's would read self.number, which the new setup no longer assigns)
WITHOUT_SOLUTION = """\
        words = ["amber", "basil", "cedar", "delta", "ember", "flint", "grove", "haven"]
        self.word = self.rng.choice(words)
        self.used = 0
        return "Guess the hidden word, one of " + ", ".join(words) + ", like \\\\boxed{amber}."

    def play(self, move: str) -> tuple[str, float, bool]:
        guess = move.strip().lower()
        self.used += 1
        if guess == self.word:
            return "Right!", 1.0, True
        return f"{self.score(guess)} letters in place.", 0.0, self.used >= self.guesses
"""
SOLUTION_BODY = '        return ["\\\\boxed{" + self.word + "}"]\n'
SCORE_REST = """, guess: str) -> int:
        return sum(a == b for a, b in zip(guess, self.word))
"""


def _attempt(answer: str) -> DesignAttempt:
    plan = plan_splice(NUMBER_HUNT)
    assert plan is not None
    att = DesignAttempt(slot=0, attempt=0, skill="s", doc_id="d", messages=[])
    att.prefill, att.completion = plan.prefill, answer
    att.code, att.spliced = splice(
        NUMBER_HUNT,
        plan.prefill.removeprefix(FENCE) + answer,
        class_name="WEnv",
        skill="s",
        note="",
    )
    return att


def test_an_asked_hook_left_unwritten_is_asked_first_with_the_parents_signature():
    att = _attempt(WITHOUT_SOLUTION)
    signature = next_signature(att, NUMBER_HUNT, ("setup", "play", "solution"))
    assert signature == "    def solution(self) -> list[str]:\n"
    prefill = followup_prefill(att, signature)
    assert prefill.startswith(att.prefill) and prefill.endswith(f"\n\n{signature}")
    assert 'return f"{self.score(guess)} letters in place."' in prefill


def test_then_a_method_the_class_calls_and_nothing_defines():
    att = _attempt(WITHOUT_SOLUTION + "\n    def solution(self) -> list[str]:\n" + SOLUTION_BODY)
    assert unwritten_methods(str(att.code)) == ["score"]
    assert next_signature(att, NUMBER_HUNT, ("setup", "play", "solution")) == "    def score(self"


def test_nothing_is_asked_of_a_complete_answer_or_of_one_that_was_not_spliced():
    whole = WITHOUT_SOLUTION + "\n    def solution(self) -> list[str]:\n" + SOLUTION_BODY
    att = _attempt(whole + "\n    def score(self" + SCORE_REST)
    assert next_signature(att, NUMBER_HUNT, ("setup", "play", "solution")) is None
    att.code, att.spliced = None, []
    assert next_signature(att, NUMBER_HUNT, ("setup", "play", "solution")) is None


def test_unwritten_methods_ignores_what_the_base_the_class_or_an_assignment_binds():
    code = (
        "from spade.envs import TextEnv\n\n\nclass AEnv(TextEnv):\n    check = len\n\n"
        "    def setup(self) -> str:\n        self.f = str\n        self.rng.random()\n"
        "        return self.f(self.check('x')) + self.g() + self.h.k()\n"
    )
    assert unwritten_methods(code) == ["g"]  # self.h is read, not called: the gate's to judge
    assert unwritten_methods("def broken(:\n") == []


@pytest.mark.sandbox
def test_followups_complete_a_splice_that_is_then_accepted_and_trained_per_segment(corpus):
    answers = [WITHOUT_SOLUTION, SOLUTION_BODY, SCORE_REST]
    with serve(Script(_every_skill(answers))) as server:
        cfg = _cfg(server, corpus, attempts_per_slot=1, followups=2)
        (att,) = run(cfg, _memory(cfg))
        prefills = [
            r["messages"][-1]["content"]
            for r in server.chat_requests
            if "Target skill" in str(r["messages"])
        ]
    assert [p.rsplit("\n\n", 1)[-1] for p in prefills[1:]] == [
        "    def solution(self) -> list[str]:\n",
        "    def score(self",
    ]
    assert att.spliced == ["setup", "play", "solution", "score"]
    assert att.accepted, att.verdict
    assert len(att.segments) == 3 and [s["text"] for s in att.segments] == answers
    samples = samples_from_design_attempts([att], [1.0])
    assert len(samples) == 3  # each sampled part trained once, the harness's text never
    for sample, part in zip(samples, att.segments, strict=True):
        assert sum(sample.loss_mask) == len(part["token_ids"]) > 0


@pytest.mark.sandbox
def test_no_followups_when_switched_off(corpus):
    with serve(Script(_every_skill([WITHOUT_SOLUTION]))) as server:
        cfg = _cfg(server, corpus, attempts_per_slot=1, followups=0)
        (att,) = run(cfg, _memory(cfg))
    assert att.spliced == ["setup", "play"] and not att.segments and not att.accepted
