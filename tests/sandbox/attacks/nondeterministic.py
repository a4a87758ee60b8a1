"""Well-formed, but its step observations use the unseeded module-level random."""

import random

from spade.envs import TextEnv


class NondeterministicEnv(TextEnv):
    def setup(self):
        self.secret = self.rng.randint(1, 9)
        return "Guess a number from 1 to 9: answer with \\boxed{n}."

    def play(self, move):
        noise = random.random()  # not self.rng: differs between sessions with the same seed
        if move.strip() == str(self.secret):
            return "Correct! (lucky number %.6f)" % noise, 1.0, True
        return "Wrong (lucky number %.6f)." % noise, 0.0, False

    def solution(self):
        return ["\\boxed{%d}" % self.secret]
