"""Polynomial probe (mathematical_reasoning): recover a hidden cubic from a few evaluations."""

import re

from spade.envs import TextEnv

_QUERY = re.compile(r"^f\s*\(\s*(-?\d{1,4})\s*\)$", re.IGNORECASE)
_INT = re.compile(r"-?\d{1,6}")


class PolynomialProbeEnv(TextEnv):
    """Find the integer coefficients of a hidden polynomial by asking for its values.

    Hidden state: coefficients a3, a2, a1, a0 in [-9, 9] (a3 non-zero). The agent may evaluate
    f at a limited number of integer points in [-10, 10], then submits once. Partial reward: a
    wrong submission scores half the share of coefficients it got right; the exact one scores 1.
    """

    skill = "mathematical_reasoning"
    hint = (
        "Evaluate f at distinct small points and solve the linear system they give "
        "(finite differences help); f(0) is the constant term."
    )

    def __init__(self, max_turns: int = 25, queries: int = 5, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
        self.degree = 3
        self.queries = queries

    def setup(self) -> str:
        nonzero = [c for c in range(-9, 10) if c != 0]
        self.coeffs = [self.rng.choice(nonzero)] + [self.rng.randint(-9, 9) for _ in range(3)]
        self.used = 0
        return (
            "I hid a polynomial f(x) = a3*x^3 + a2*x^2 + a1*x + a0 with integer coefficients "
            "between -9 and 9 (a3 is not zero). Ask for a value with \\boxed{f(2)} (x must be an "
            f"integer from -10 to 10; you have {self.queries} evaluations). When ready, submit "
            "once with \\boxed{answer a3, a2, a1, a0}, e.g. \\boxed{answer 1, -2, 0, 7}."
        )

    def value(self, x: int) -> int:
        total = 0
        for c in self.coeffs:
            total = total * x + c
        return total

    def play(self, move: str) -> tuple[str, float, bool]:
        query = _QUERY.match(move)
        if query:
            x = int(query.group(1))
            if not -10 <= x <= 10:
                return "x must be an integer from -10 to 10.", 0.0, False
            if self.used >= self.queries:
                return "No evaluations left; submit your answer.", 0.0, False
            self.used += 1
            left = self.queries - self.used
            return f"{self.clue(x)}. {left} evaluations left.", 0.0, False
        if move.lower().startswith("answer"):
            nums = _INT.findall(move)
            if len(nums) != 4:
                return "Submit exactly four integers: \\boxed{answer a3, a2, a1, a0}.", 0.0, False
            right = sum(int(n) == c for n, c in zip(nums, self.coeffs, strict=True))
            if right == 4:
                return "Correct, that is the polynomial!", 1.0, True
            return f"Wrong: {right} of 4 coefficients are right.", self.credit(right), True
        return "Write \\boxed{f(x)} for a value or \\boxed{answer a3, a2, a1, a0}.", 0.0, False

    def clue(self, x: int) -> str:
        """What the player is told when asking about the point x (an integer from -10 to 10)."""
        return f"f({x}) = {self.value(x)}"

    def credit(self, right: int) -> float:
        """The score, from 0 to 1, of a wrong submission with ``right`` of 4 coefficients right."""
        return 0.5 * right / 4

    def solution(self) -> list[str]:
        moves = [f"\\boxed{{f({x})}}" for x in (0, 1, -1, 2)]
        return [*moves, "\\boxed{answer " + ", ".join(str(c) for c in self.coeffs) + "}"]
