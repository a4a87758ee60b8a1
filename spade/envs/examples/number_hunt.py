"""Number hunt (mathematical reasoning): find a hidden number from higher/lower feedback."""

from spade.envs import TextEnv


class NumberHuntEnv(TextEnv):
    """Guess a hidden whole number; each wrong guess is told whether the number is higher or
    lower. Bisection finds it in 10 guesses.

    Hidden state: the number. Partial reward: when the guesses or the turns run out, how close
    the closest guess came, ``0.5 * (1 - distance / top)``; finding it scores 1. The easy end of
    the bundled examples: one guess in range earns something, so even a small model's plays
    differ.
    """

    skill = "mathematical_reasoning"
    hint = "Guess the middle of the range that is still possible, then halve it each time."

    def __init__(self, max_turns: int = 25, top: int = 999, guesses: int = 10, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
        self.top = top
        self.guesses = min(guesses, self.max_turns)

    def setup(self) -> str:
        self.number = self.rng.randint(1, self.top)
        self.used = 0
        self.closest: int | None = None  # distance of the closest guess so far
        return (
            f"I am thinking of a whole number from 1 to {self.top}. Guess it with a number in a"
            f" box, like \\boxed{{500}}; I will say whether my number is higher or lower. You have"
            f" {self.guesses} guesses."
        )

    def play(self, move: str) -> tuple[str, float, bool]:
        text = move.strip().rstrip(".")
        if not text.isdigit() or not 1 <= int(text) <= self.top:
            return self.end(f"Invalid guess {move!r}: give one whole number from 1 to {self.top}.")
        guess = int(text)
        self.used += 1
        if guess == self.number:
            return f"{guess} is right!", 1.0, True
        distance = abs(guess - self.number)
        self.closest = distance if self.closest is None else min(self.closest, distance)
        if self.used >= self.guesses:
            return self.end(f"{self.clue(guess)} No guesses left.", over=True)
        left = self.guesses - self.used
        return self.end(f"{self.clue(guess)} {left} guesses left.")

    def clue(self, guess: int) -> str:
        """What the player is told about a wrong guess (a whole number from 1 to self.top)."""
        direction = "higher" if self.number > guess else "lower"
        return f"My number is {direction} than {guess}."

    def end(self, text: str, over: bool = False) -> tuple[str, float, bool]:
        """``text``, and the closest guess's score if this is the last guess or turn."""
        if not (over or self.turn >= self.max_turns) or self.closest is None:
            return text, 0.0, False
        score = self.credit(self.closest)
        return f"{text} Your closest guess was {self.closest} away.", score, True

    def credit(self, distance: int) -> float:
        """The score, from 0 to 1, of an episode that ends without the number found, when the
        closest guess was ``distance`` away."""
        return 0.5 * (1 - distance / self.top)

    def solution(self) -> list[str]:
        return ["\\boxed{" + str(self.number) + "}"]
