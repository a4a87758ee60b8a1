"""Attack: import a module outside the allow-list (pickle) at module top."""

import pickle


class ImportPickleEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return pickle.dumps(1).hex(), {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
