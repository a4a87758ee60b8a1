"""Attack: reach a module outside the allow-list as an attribute of an allowed one in reset()
(``collections._sys``, ``random._os``, ``typing.sys``, ``dataclasses.builtins``)."""

import __MODULE__


class ReachAttributeEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "reached " + str(__MODULE__.__ATTR__)[:60], {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
