"""Attack: hard-exit the interpreter with _exit(3) in step() (libc's, as os._exit calls it)."""

import ctypes


class OsExitEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Guess the number: answer with \\boxed{n}.", {}

    def step(self, action):
        ctypes.CDLL(None)._exit(3)

    def solution(self):
        return ["\\boxed{7}"]
