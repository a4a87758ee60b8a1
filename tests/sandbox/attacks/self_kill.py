"""Attack: send a deadly signal (__SIGNAL__) to its own process in reset() (in a pid namespace
it is pid 1, and the kernel drops signals a namespace's init sends itself without a handler)."""

import os
import signal


class SelfKillEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return os.kill(os.getpid(), signal.__SIGNAL__)

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
