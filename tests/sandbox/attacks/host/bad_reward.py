"""Attack: a step reward the host cannot take as a float in range: __REWARD__ (an int of 401
digits made the host's ``math.isfinite`` raise OverflowError)."""


class BadRewardEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "move", {}

    def step(self, action):
        return "done", __REWARD__, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
