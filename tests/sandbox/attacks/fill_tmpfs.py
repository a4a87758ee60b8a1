"""Attack: fill the private /tmp with 1 MiB files until something gives, in reset()."""


class FillTmpfsEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        chunk = b"F" * (1 << 20)
        i = 0
        while True:
            with open("/tmp/__PREFIX__%d" % i, "wb") as fh:
                fh.write(chunk)
            i += 1

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
