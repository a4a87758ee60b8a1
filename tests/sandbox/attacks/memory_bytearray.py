"""Attack: allocate 10 GB at once in reset() (no imports needed)."""


class MemoryBytearrayEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        hog = bytearray(10**10)
        return "allocated %d bytes" % len(hog), {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
