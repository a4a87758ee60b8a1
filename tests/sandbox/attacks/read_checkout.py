"""Attack: read a file of the project checkout (placeholder __PATH__) in reset()."""


class ReadCheckoutEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        with open("__PATH__") as fh:
            return fh.read(), {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
