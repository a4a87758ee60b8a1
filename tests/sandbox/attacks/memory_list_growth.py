"""Attack: grow a list of 1 MiB chunks forever in reset() (no imports needed)."""


class MemoryListGrowthEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        hoard = []
        i = 0
        while True:
            hoard.append(bytearray(1 << 20))
            hoard[-1][::4096] = b"x" * (1 << 8)  # touch every page: really resident
            i += 1

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
