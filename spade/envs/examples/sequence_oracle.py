"""Sequence oracle (pattern_recognition): see some terms of a hidden sequence, predict more."""

import re

from spade.envs import TextEnv

_ASK = re.compile(r"^(?:ask|term|t)\s*\(?\s*(\d{1,3})\s*\)?$", re.IGNORECASE)
_INT = re.compile(r"-?\d{1,30}")
_KINDS = (
    "arithmetic, quadratic, geometric, Fibonacci-style, two interleaved arithmetic sequences, "
    "t(n) = 2*t(n-1) + c"
)


class SequenceOracleEnv(TextEnv):
    """Reveal up to six of the terms t(1)..t(12) of a hidden sequence, then predict three more.

    Hidden state: the rule family and its parameters. The agent chooses which terms to reveal.
    Partial reward: the share of the three predicted terms that are exactly right (one submission).
    """

    skill = "pattern_recognition"
    hint = (
        "Reveal consecutive early terms, compare differences and ratios to pin down the rule, "
        "then extrapolate carefully."
    )

    def __init__(self, max_turns: int = 25, asks: int = 6, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
        self.asks = asks

    def setup(self) -> str:
        rng = self.rng
        kind = rng.choice(
            ["arithmetic", "quadratic", "geometric", "fibonacci", "interleaved", "doubling"]
        )
        self.kind = kind
        sign = rng.choice([-1, 1])
        if kind == "arithmetic":
            a, d = rng.randint(-20, 20), sign * rng.randint(2, 9)
            terms = [a + (n - 1) * d for n in range(1, 21)]
        elif kind == "quadratic":
            a, b, c = sign * rng.randint(1, 3), rng.randint(-5, 5), rng.randint(-10, 10)
            terms = [a * n * n + b * n + c for n in range(1, 21)]
        elif kind == "geometric":
            a, r = sign * rng.randint(1, 5), rng.choice([2, 3, -2])
            terms = [a * r ** (n - 1) for n in range(1, 21)]
        elif kind == "fibonacci":
            terms = [rng.randint(1, 9), rng.randint(1, 9)]
            while len(terms) < 20:
                terms.append(terms[-1] + terms[-2])
        elif kind == "interleaved":
            a, b = rng.randint(-10, 10), rng.randint(-10, 10)
            d1, d2 = rng.sample([-7, -5, -3, -2, 2, 3, 4, 6, 8], 2)
            terms = [(a + (n // 2) * d1) if n % 2 == 0 else (b + (n // 2) * d2) for n in range(20)]
        else:
            first = rng.randint(1, 5)
            c = rng.choice([x for x in (-3, -2, -1, 1, 2, 3) if x != -first])
            terms = [first]
            while len(terms) < 20:
                terms.append(2 * terms[-1] + c)
        self.terms = terms
        self.targets = sorted(rng.sample(range(13, 21), 3))
        self.used = 0
        want = ", ".join(f"t({i})" for i in self.targets)
        return (
            f"A hidden integer sequence t(1), t(2), ... follows one rule of these kinds: {_KINDS}. "
            f"Reveal a term with \\boxed{{ask n}} for n from 1 to 12 ({self.asks} reveals). Then "
            f"predict {want} in one submission: \\boxed{{predict x, y, z}}."
        )

    def play(self, move: str) -> tuple[str, float, bool]:
        ask = _ASK.match(move)
        if ask:
            n = int(ask.group(1))
            if not 1 <= n <= 12:
                return "You may only reveal t(1) to t(12).", 0.0, False
            if self.used >= self.asks:
                return "No reveals left; submit your prediction.", 0.0, False
            self.used += 1
            return (
                f"t({n}) = {self.terms[n - 1]}. {self.asks - self.used} reveals left.",
                0.0,
                False,
            )
        if move.lower().startswith(("predict", "answer")):
            nums = _INT.findall(move)
            if len(nums) != 3:
                return "Predict exactly three integers: \\boxed{predict x, y, z}.", 0.0, False
            truth = [self.terms[i - 1] for i in self.targets]
            right = sum(int(x) == t for x, t in zip(nums, truth, strict=True))
            if right == 3:
                return "All three predictions are right!", 1.0, True
            shown = ", ".join(str(t) for t in truth)
            return f"{right} of 3 predictions are right (the terms were {shown}).", right / 3, True
        return "Write \\boxed{ask n} or \\boxed{predict x, y, z}.", 0.0, False

    def solution(self) -> list[str]:
        asks = [f"\\boxed{{ask {n}}}" for n in range(1, 6)]
        guess = ", ".join(str(self.terms[i - 1]) for i in self.targets)
        return [*asks, "\\boxed{predict " + guess + "}"]
