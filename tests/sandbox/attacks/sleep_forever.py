"""Attack: sleep (practically) forever in step(); time is an allowed module."""

import time


class SleepForeverEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Guess the number: answer with \\boxed{n}.", {}

    def step(self, action):
        time.sleep(10**6)
        return "woke up", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{7}"]
