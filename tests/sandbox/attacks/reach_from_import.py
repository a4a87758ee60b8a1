"""Attack: take a module outside the allow-list out of an allowed one with a from-import
(``from random import _os``, ``from typing import sys``, ``from random import __builtins__``)."""

from __MODULE__ import __TAKEN__ as reached


class ReachFromImportEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "reached " + str(reached)[:60], {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
