"""Attack: write a file outside the private tmpfs (placeholder __PATH__) in reset()."""


class WriteOutsideEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        with open("__PATH__", "w") as fh:
            fh.write("pwned\n")
        return "wrote __PATH__", {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
