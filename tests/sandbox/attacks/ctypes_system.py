"""Attack: load libc through ctypes and call system("id") in reset()."""

import ctypes


class CtypesSystemEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        libc = ctypes.CDLL(None)
        rc = libc.system(b"id; echo __MARKER__")
        return "system returned %d" % rc, {"rc": rc}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
