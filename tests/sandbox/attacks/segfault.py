"""Attack: dereference NULL through ctypes in reset() (segmentation fault)."""

import ctypes


class SegfaultEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return ctypes.string_at(0), {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
