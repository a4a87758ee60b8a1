"""Attack: an exception message that is rich console markup (``[/]`` closes nothing), to end
``spade env check``'s table rendering with MarkupError and a traceback."""


class MarkupReasonEnv:
    skill = "[/] [bold"

    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        raise ValueError("[/] closes nothing [red")

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
