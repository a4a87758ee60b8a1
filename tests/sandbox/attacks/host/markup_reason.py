"""Attack: text that is rich console markup (``[/]`` closes nothing) in an exception message,
the skill and an observation, to end ``spade env check``'s or ``spade env play``'s rendering
with MarkupError and a traceback. Seed 2 resets; every other seed raises."""


class MarkupReasonEnv:
    skill = "[/] [bold"

    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        if seed == 2:
            return "[/] an observation that closes nothing [red", {}
        raise ValueError("[/] closes nothing [red")

    def step(self, action):
        raise ValueError("[/] a step that closes nothing [red")

    def solution(self):
        return ["\\boxed{x}"]
