"""Well-formed, but solution() does not solve it: it always guesses a wrong number."""

from spade.envs import TextEnv


class InfeasibleEnv(TextEnv):
    def setup(self):
        self.secret = self.rng.randint(1, 9)
        return "Guess a number from 1 to 9: answer with \\boxed{n}. One guess only."

    def play(self, move):
        if move.strip() == str(self.secret):
            return "Correct!", 1.0, True
        if move.strip().isdigit():
            return "Wrong, the game is over.", 0.0, True
        return "Write a number.", 0.0, False

    def solution(self):
        return ["\\boxed{%d}" % (self.secret % 9 + 1)]  # always off by one: never the secret
