"""Switchboard (causal_inference): run switch experiments to learn which switch drives each lamp."""

import re

from spade.envs import TextEnv

_LAMPS = "ABCDEF"
_PAIR = re.compile(r"([A-Fa-f])\s*[=:]\s*(\d)")


class SwitchboardEnv(TextEnv):
    """Six switches and six lamps; every lamp follows exactly one switch, maybe inverted.

    Hidden state: the controlling switch of each lamp (a switch may drive several lamps or none)
    and which lamps are wired inverted. Only three experiments (toggling any set of switches at
    once) are allowed. Partial reward: the share of lamps whose switch is named correctly.
    """

    skill = "causal_inference"
    hint = (
        "A lamp changes exactly when its switch is toggled, so give each switch a different "
        "on/off pattern across the experiments and read each lamp's pattern of changes."
    )

    def __init__(self, max_turns: int = 25, experiments: int = 3, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
        self.experiments = experiments

    def setup(self) -> str:
        rng = self.rng
        self.control = [rng.randint(1, 6) for _ in _LAMPS]
        self.inverted = [rng.random() < 0.5 for _ in _LAMPS]
        self.switches = [rng.random() < 0.5 for _ in range(6)]
        self.used = 0
        return (
            "A panel has switches 1-6 and lamps A-F. Each lamp is wired to exactly one switch "
            "(a switch may drive several lamps or none; some lamps are wired inverted). Run an "
            f"experiment with \\boxed{{toggle 1 4 5}}, which flips those switches at once; you "
            f"have {self.experiments} experiments. Then name each lamp's switch in one answer, "
            f"e.g. \\boxed{{A=1, B=2, C=2, D=6, E=3, F=1}}.\n{self.clue()}"
        )

    def clue(self) -> str:
        """What the player sees of the panel (at the start, after each experiment)."""
        ups = " ".join(f"{i + 1}:{'up' if s else 'down'}" for i, s in enumerate(self.switches))
        lit = " ".join(f"{lamp}:{'on' if self.lit(k) else 'off'}" for k, lamp in enumerate(_LAMPS))
        return f"Switches {ups}\nLamps {lit}"

    def lit(self, k: int) -> bool:
        return self.switches[self.control[k] - 1] != self.inverted[k]

    def play(self, move: str) -> tuple[str, float, bool]:
        low = move.lower()
        if low.startswith("toggle"):
            picked = sorted({int(x) for x in re.findall(r"\d{1,3}", move)})
            if not picked or any(not 1 <= i <= 6 for i in picked):
                return "Toggle a list of switch numbers from 1 to 6.", 0.0, False
            if self.used >= self.experiments:
                return "No experiments left; give your answer.", 0.0, False
            self.used += 1
            for i in picked:
                self.switches[i - 1] = not self.switches[i - 1]
            left = self.experiments - self.used
            return f"Toggled {picked}. {left} experiments left.\n{self.clue()}", 0.0, False
        pairs = {lamp.upper(): int(s) for lamp, s in _PAIR.findall(move)}
        if len(pairs) == 6:
            right = sum(pairs[lamp] == self.control[k] for k, lamp in enumerate(_LAMPS))
            if right == 6:
                return "Every lamp is matched to its switch!", 1.0, True
            return f"{right} of 6 lamps are matched correctly.", right / 6, True
        return (
            "Write \\boxed{toggle i j ...} or name all six lamps: \\boxed{A=1, ..., F=6}.",
            0.0,
            False,
        )

    def solution(self) -> list[str]:
        tests = []
        for bit in range(self.experiments):
            picked = [str(i) for i in range(1, 7) if i >> bit & 1]
            tests.append("\\boxed{toggle " + " ".join(picked) + "}")
        answer = ", ".join(f"{lamp}={self.control[k]}" for k, lamp in enumerate(_LAMPS))
        return [*tests, "\\boxed{" + answer + "}"]
