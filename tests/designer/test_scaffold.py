"""The scaffold strategy: the harness's frame, one body per request, the assembled module
verified in the jail, and each body a training sample of its own."""

from __future__ import annotations

import ast

import pytest

from spade.designer import scaffold
from spade.designer.skills import SKILL_DESCRIPTIONS
from spade.training.samples import samples_from_design_attempts
from tests.designer.test_design_batch import Script, config, corpus, run, serve

__all__ = ["corpus"]  # the fixture, shared with test_design_batch

SETUP = """\
        words = ["amber", "basil", "cedar", "delta", "ember", "flint", "grove", "haven"]
        self.word = self.rng.choice(words)
        self.left = 6
        return ("Guess the hidden word from: " + ", ".join(words) + ". Write it in a box,"
                " like \\\\boxed{amber}. I say how many letters are in place. 6 guesses.")
"""
PLAY = """\
        guess = move.strip().lower()
        if len(guess) != 5 or not guess.isalpha():
            return "Give one five-letter word.", 0.0, False
        self.left -= 1
        if guess == self.word:
            return "Right!", 1.0, True
        hits = sum(a == b for a, b in zip(guess, self.word))
        if self.left == 0:
            return f"{hits} in place. No guesses left.", hits / 10, True
        return f"{hits} in place.", 0.0, False

    def extra(self):  # a helper it was not asked for: the stop string cuts it
        return 1
"""
SOLUTION = '        return ["\\\\boxed{" + self.word + "}"]\n```\nThat is the game.'


def test_the_frame_and_bodies_assemble_into_a_module():
    frame = scaffold.header("CedarEnv", "logical_deduction", tool_use=False)
    signatures = scaffold.hooks(False)
    assert frame.startswith("```python\nclass CedarEnv(TextEnv):\n    skill = 'logical_deduction'")
    assert scaffold.prefill(frame, [], signatures).endswith(signatures[0] + "\n")
    second = scaffold.prefill(frame, [SETUP], signatures)
    assert second.endswith(signatures[1] + "\n") and "self.word = " in second
    code = scaffold.module(frame, [SETUP, PLAY, SOLUTION], signatures)
    tree = ast.parse(code)
    (cls,) = tree.body
    assert isinstance(cls, ast.ClassDef)
    assert [n.name for n in cls.body if isinstance(n, ast.FunctionDef)] == [
        "setup",
        "play",
        "solution",
    ]
    assert "def extra" not in code and "That is the game" not in code


def test_an_empty_body_is_pass_and_the_class_name_comes_from_the_document():
    assert scaffold.clean_body("\n\n") == "        pass"
    assert scaffold.class_name("Cedar is a tree") == "CedarEnv"
    assert scaffold.class_name("  ... ") == "TaskEnv"
    assert "check_answer" in scaffold.hooks(True)[1]


@pytest.mark.sandbox
def test_a_scaffolded_design_is_sampled_body_by_body_and_accepted(corpus):
    answers = {skill: [SETUP, PLAY, SOLUTION] for skill in SKILL_DESCRIPTIONS}
    with serve(Script(answers)) as server:
        cfg = config(  # the stand-in counts characters as tokens
            server, corpus, strategy="scaffold", attempts_per_slot=1, scaffold_body_tokens=2000
        )
        (att,) = run(cfg)
        requests = [r for r in server.chat_requests if "Target skill" in str(r["messages"])]
    assert len(requests) == 3  # one per hook, each continuing the answer so far
    starts = [r["messages"][-1]["content"] for r in requests]
    assert starts[0] == att.prefill + scaffold.GAME_HOOKS[0] + "\n"
    assert starts[1].endswith(scaffold.GAME_HOOKS[1] + "\n") and "self.word" in starts[1]
    assert all(r["stop"] == list(scaffold.STOP) for r in requests)
    assert att.strategy == "scaffold" and att.accepted, att.verdict
    assert len(att.segments) == 3 and not att.token_ids  # a segment per body
    samples = samples_from_design_attempts([att], [0.5])
    assert len(samples) == 3
    for sample, part in zip(samples, att.segments, strict=True):
        trained = [t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
        assert trained == part["token_ids"]  # the frame and signatures are prompt
