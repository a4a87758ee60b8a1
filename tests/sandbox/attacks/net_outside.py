"""Attack: connect to a host outside the machine (placeholder __HOST__) from reset()."""

import socket


class NetOutsideEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(("__HOST__", 80))
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = s.recv(200)
        s.close()
        return "connected: " + repr(data), {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
