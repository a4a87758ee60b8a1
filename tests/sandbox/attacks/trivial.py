"""Well-formed and solvable, but any action at all (even "") wins at once."""

from spade.envs import TextEnv


class TrivialEnv(TextEnv):
    def setup(self):
        self.secret = self.rng.randint(1, 9)
        return "Guess a number from 1 to 9: answer with \\boxed{n}."

    def act(self, action):
        return "You win!", 1.0, True

    def solution(self):
        return ["\\boxed{%d}" % self.secret]
