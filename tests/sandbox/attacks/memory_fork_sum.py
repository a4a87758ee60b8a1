"""Attack: fork __CHILDREN__ processes in reset(), each touching __MIB__ MiB: each stays
under RLIMIT_AS, their sum does not stay under the session's memory cgroup limit.

The observation is each child's exit code (0: it held its memory to the end; -9: killed).
"""

import ctypes
import os
import time

libc = ctypes.CDLL(None)


def hold(mib):
    data = b"x" * (mib << 20)  # written, so every page is resident
    time.sleep(1.0)  # the others allocate meanwhile: the sum is held at once
    return len(data)


class MemoryForkSumEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        pids = []
        for _ in range(__CHILDREN__):
            pid = os.fork()
            if pid == 0:
                hold(__MIB__)
                libc._exit(0)
            pids.append(pid)
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        return repr(codes), {"codes": codes}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
