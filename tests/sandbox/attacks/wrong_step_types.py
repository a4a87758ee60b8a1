"""Contract breach: step() returns (123, "a", None) instead of the 5-tuple."""

from spade.envs import TextEnv


class WrongStepTypesEnv(TextEnv):
    def setup(self):
        self.secret = self.rng.randint(1, 9)
        return "Guess a number from 1 to 9: answer with \\boxed{n}."

    def step(self, action):
        return (123, "a", None)

    def solution(self):
        return ["\\boxed{%d}" % self.secret]
