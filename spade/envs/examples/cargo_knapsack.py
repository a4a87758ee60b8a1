"""Cargo knapsack (optimization): inspect hidden crates, then load the best set that fits."""

import itertools
import re

from spade.envs import TextEnv

_INSPECT = re.compile(r"^inspect\s*(\d{1,3})$", re.IGNORECASE)
_INT = re.compile(r"\d{1,3}")


class CargoKnapsackEnv(TextEnv):
    """Load crates into a hold of fixed capacity; weights and values are hidden until inspected.

    Hidden state: the weights and values of eight crates. One loading decision ends the episode.
    Partial reward: loaded value divided by the optimal value (0 when over capacity).
    """

    skill = "optimization"
    hint = (
        "Inspect every crate first, then compare combinations rather than greedily taking "
        "the best value per weight."
    )

    def __init__(self, max_turns: int = 25, crates: int = 8, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
        self.count = crates

    def setup(self) -> str:
        n = self.count
        for _ in range(100):
            self.weights = [self.rng.randint(2, 12) for _ in range(n)]
            self.values = [self.rng.randint(3, 30) for _ in range(n)]
            self.capacity = sum(self.weights) * 2 // 5
            self.best = 0
            self.best_set: tuple[int, ...] = ()
            for k in range(1, n + 1):
                for combo in itertools.combinations(range(n), k):
                    weight = sum(self.weights[i] for i in combo)
                    value = sum(self.values[i] for i in combo)
                    if weight <= self.capacity and value > self.best:
                        self.best, self.best_set = value, combo
            greedy = max(self.values[i] for i in range(n) if self.weights[i] <= self.capacity)
            if len(self.best_set) >= 2 and greedy < self.best:
                break
        return (
            f"Your ship's hold carries at most {self.capacity} tons. There are {n} crates, "
            f"numbered 1 to {n}; their weights and values are unknown until you inspect them "
            f"(\\boxed{{inspect 3}}, one per turn). Load once, e.g. \\boxed{{load 1, 4, 6}}: "
            "the score is the loaded value relative to the best possible load."
        )

    def play(self, move: str) -> tuple[str, float, bool]:
        inspect = _INSPECT.match(move)
        if inspect:
            i = int(inspect.group(1))
            if not 1 <= i <= self.count:
                return f"Crates are numbered 1 to {self.count}.", 0.0, False
            return self.clue(i), 0.0, False
        if move.lower().startswith("load"):
            picked = sorted({int(x) for x in _INT.findall(move)})
            if not picked or any(not 1 <= i <= self.count for i in picked):
                return f"Load a list of crate numbers from 1 to {self.count}.", 0.0, False
            weight = sum(self.weights[i - 1] for i in picked)
            value = sum(self.values[i - 1] for i in picked)
            if weight > self.capacity:
                return (
                    f"Weight {weight} exceeds the capacity {self.capacity}: the ship cannot sail.",
                    0.0,
                    True,
                )
            score = value / self.best
            verdict = (
                "That is an optimal load!"
                if value == self.best
                else f"The best load is worth {self.best}."
            )
            return f"Loaded weight {weight}, value {value}. {verdict}", score, True
        return "Write \\boxed{inspect n} or \\boxed{load i, j, ...}.", 0.0, False

    def clue(self, crate: int) -> str:
        """What inspecting crate ``crate`` (1 to self.count) reveals."""
        w, v = self.weights[crate - 1], self.values[crate - 1]
        return f"Crate {crate}: weight {w} tons, value {v}."

    def solution(self) -> list[str]:
        looks = [f"\\boxed{{inspect {i}}}" for i in range(1, self.count + 1)]
        return [*looks, "\\boxed{load " + ", ".join(str(i + 1) for i in self.best_set) + "}"]
