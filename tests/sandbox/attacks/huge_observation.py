"""Attack: return a 5 MiB observation from reset() (past the 1 MiB reply cap)."""


class HugeObservationEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "x" * (5 << 20), {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
