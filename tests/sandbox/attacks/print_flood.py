"""Attack: print in an endless loop in step() (print is allowed; the log is capped)."""


class PrintFloodEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Guess the number: answer with \\boxed{n}.", {}

    def step(self, action):
        line = "flood " * 700
        while True:
            print(line)

    def solution(self):
        return ["\\boxed{7}"]
