"""Attack: raw syscalls through ctypes in reset(): new namespaces (clone, clone3), the new
mount API and io_uring. The observation is a dict: probe -> 0 (it worked) or the errno.

Each probe is built so that it would succeed (or fail with an errno other than EPERM/ENOSYS)
without the jail's seccomp filter, as uid 65534 in nsjail's user namespace (x86_64 numbers).
Threads and fork, which need an ordinary clone, are probed too: they must keep working.
"""

import ctypes
import os
import threading

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SIGCHLD = 17
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
AT_FDCWD = -100
NR = {
    "clone": 56, "clone3": 435, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
}  # fmt: skip


def raw(name, *args):
    """(result, errno) of one raw syscall."""
    ctypes.set_errno(0)
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = libc.syscall(ctypes.c_long(NR[name]), *args)
    return result, ctypes.get_errno() if result < 0 else 0


def in_child(result, err, child):
    """A fork-like clone returned: run ``child`` in the child, exit with its code; the
    parent reaps it and returns 0 if it exited 0, else the errno (or 1000 + exit code)."""
    if result == 0:
        libc._exit(child())
    if result < 0:
        return err
    _, status = os.waitpid(result, 0)
    code = os.waitstatus_to_exitcode(status)
    return 0 if code == 0 else 1000 + code


def mount_tmpfs():
    """In a fresh user+mount namespace (all capabilities there): fsopen a tmpfs."""
    fd, err = raw("fsopen", b"tmpfs", 0)
    return 0 if fd >= 0 else min(err, 200)


def probe_clone(flags, child=lambda: 0):
    return in_child(*raw("clone", flags | SIGCHLD, 0, 0, 0, 0), child)


def probe_clone3(flags):
    args = (ctypes.c_uint64 * 11)(flags, 0, 0, 0, SIGCHLD)  # struct clone_args, 88 bytes
    return in_child(*raw("clone3", ctypes.byref(args), ctypes.sizeof(args)), lambda: 0)


def probe_fd(name, *args):
    fd, err = raw(name, *args)
    if fd >= 0:
        os.close(fd)
    return err


def probe_thread():
    ran = []
    worker = threading.Thread(target=lambda: ran.append(1))
    worker.start()
    worker.join()
    return 0 if ran == [1] else -1


def probe_fork():
    pid = os.fork()
    if pid == 0:
        libc._exit(7)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) - 7


class RawSyscallsEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        params = (ctypes.c_uint8 * 120)()  # struct io_uring_params, zeroed
        probes = {
            "clone_newuser": probe_clone(CLONE_NEWUSER),
            "clone_newuser_fsopen": probe_clone(CLONE_NEWUSER | CLONE_NEWNS, mount_tmpfs),
            "clone3": probe_clone3(CLONE_NEWUSER),
            "clone3_plain": probe_clone3(0),
            "open_tree": probe_fd("open_tree", AT_FDCWD, b"/tmp", 0),
            "fsconfig": raw("fsconfig", -1, 0, None, None, 0)[1],
            "mount_setattr": raw("mount_setattr", -1, b"", 0, None, 0)[1],
            "fsopen": probe_fd("fsopen", b"tmpfs", 0),
            "fsmount": probe_fd("fsmount", -1, 0, 0),
            "fspick": probe_fd("fspick", AT_FDCWD, b"/tmp", 0),
            "move_mount": raw("move_mount", -1, b"", AT_FDCWD, b"/tmp", 0)[1],
            "io_uring_setup": probe_fd("io_uring_setup", 8, ctypes.byref(params)),
            "io_uring_enter": raw("io_uring_enter", -1, 0, 0, 0, None, 0)[1],
            "io_uring_register": raw("io_uring_register", -1, 0, None, 0)[1],
            "thread": probe_thread(),
            "fork": probe_fork(),
        }
        return repr(probes), {}

    def step(self, action):
        return "ok", 1.0, True, False, {}

    def solution(self):
        return ["\\boxed{x}"]
