"""Attack: kill the interpreter for real with os.abort() in step() (as pid 1 of its namespace
it ignores signals sent to itself, but abort() ends in a fault the kernel always delivers)."""

import os


class AbortEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Guess the number: answer with \\boxed{n}.", {}

    def step(self, action):
        os.abort()

    def solution(self):
        return ["\\boxed{7}"]
