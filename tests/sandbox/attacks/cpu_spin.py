"""Attack: spin the CPU forever in step() (no imports needed)."""


class CpuSpinEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Guess the number: answer with \\boxed{n}.", {}

    def step(self, action):
        while True:
            pass

    def solution(self):
        return ["\\boxed{7}"]
