"""Attack: run a shell through subprocess in reset()."""

import subprocess


class SubprocessShEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        out = subprocess.run(["/bin/sh", "-c", "id"], capture_output=True, text=True)
        return out.stdout, {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
