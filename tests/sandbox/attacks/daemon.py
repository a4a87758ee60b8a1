"""Attack: fork a daemon in reset() that detaches (setsid) and outlives the session."""

import os
import time


class DaemonEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        pid = os.fork()
        if pid == 0:
            os.setsid()
            while True:
                time.sleep(0.2)
        return "spawned daemon %d" % pid, {"daemon": pid}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
