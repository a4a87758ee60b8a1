"""Code breaker (logical deduction): find a hidden digit code from bulls-and-cows feedback."""

from spade.envs import TextEnv


class CodeBreakerEnv(TextEnv):
    """Guess a hidden code of distinct digits; each guess reports exact and misplaced digits.

    Hidden state: the code. Partial reward: if the guesses run out, the best guess's share of
    exact digits, halved. A correct guess scores 1.
    """

    skill = "logical_deduction"
    hint = (
        "Use each guess to test a few digits at a time, and keep only codes consistent "
        "with all feedback."
    )

    def __init__(self, max_turns: int = 25, length: int = 4, guesses: int = 10, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
        self.length = length
        self.guesses = min(guesses, self.max_turns)

    def setup(self) -> str:
        self.code = "".join(self.rng.sample("0123456789", self.length))
        self.best = 0
        self.used = 0
        return (
            f"I picked a secret code of {self.length} distinct digits (0-9). Guess it: write a "
            f"guess like \\boxed{{0123}}. After each guess I tell you how many digits are in the "
            f"right place (exact) and how many are in the code but elsewhere (misplaced). "
            f"You have {self.guesses} guesses."
        )

    def play(self, move: str) -> tuple[str, float, bool]:
        guess = move.replace(" ", "")
        if len(guess) != self.length or not guess.isdigit() or len(set(guess)) != self.length:
            return f"Invalid guess {move!r}: give {self.length} distinct digits.", 0.0, False
        self.used += 1
        exact = sum(a == b for a, b in zip(guess, self.code, strict=True))
        self.best = max(self.best, exact)
        if exact == self.length:
            return f"{guess}: cracked it!", 1.0, True
        if self.used >= self.guesses:
            return f"{guess}: {self.clue(guess)}. No guesses left.", self.credit(), True
        left = self.guesses - self.used
        return f"{guess}: {self.clue(guess)}. {left} guesses left.", 0.0, False

    def clue(self, guess: str) -> str:
        """What the player is told about a wrong guess (self.length distinct digits)."""
        exact = sum(a == b for a, b in zip(guess, self.code, strict=True))
        misplaced = len(set(guess) & set(self.code)) - exact
        return f"{exact} exact, {misplaced} misplaced"

    def credit(self) -> float:
        """The score, from 0 to 1, of an episode whose guesses ran out (the best guess had
        self.best digits in the right place)."""
        return 0.5 * self.best / self.length

    def solution(self) -> list[str]:
        # one probe (the code's digits in order, or reversed if that is the code) shows a clue
        probe = "".join(sorted(self.code))
        probe = probe if probe != self.code else probe[::-1]
        return ["\\boxed{" + probe + "}", "\\boxed{" + self.code + "}"]
