"""Attack: SIGKILL its own process in reset() (in a pid namespace it is pid 1)."""

import os
import signal


class SelfKillEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return os.kill(os.getpid(), signal.SIGKILL)

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
