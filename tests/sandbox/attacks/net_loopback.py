"""Attack: reach a service on the host's loopback (placeholder __PORT__) from reset()."""

import socket


class NetLoopbackEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        s = socket.create_connection(("127.0.0.1", __PORT__), timeout=2)
        s.sendall(b"hello from the jail\n")
        s.close()
        return "reached the host's loopback", {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
