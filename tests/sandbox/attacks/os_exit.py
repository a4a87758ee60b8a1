"""Attack: hard-exit the interpreter with os._exit(3) in step()."""

import os


class OsExitEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Guess the number: answer with \\boxed{n}.", {}

    def step(self, action):
        os._exit(3)

    def solution(self):
        return ["\\boxed{7}"]
