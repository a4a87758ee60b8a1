"""Classified failures of sandboxed environments: what went wrong, as data.

Everything here is pure: the session feeds it exit codes, exception reports and log text,
and gets back a :class:`Failure` with a kind from a fixed vocabulary and a human reason.
"""

from __future__ import annotations

import errno as errno_mod
import signal

from spade.records import Failure, FailureKind


class EnvFailure(Exception):
    """Raised by a session call that failed; carries the classified :class:`Failure`.

    The session's caller (verifier, rollout, gym adapter) catches it and keeps the failure
    as data. ``fatal`` says whether the jailed process is gone.
    """

    def __init__(self, failure: Failure, *, fatal: bool) -> None:
        super().__init__(f"{failure.kind}: {failure.reason}")
        self.failure = failure
        self.fatal = fatal


_FS_ERRNOS = {errno_mod.EACCES, errno_mod.EPERM, errno_mod.EROFS, errno_mod.ENOENT}
_NET_ERRNOS = {
    errno_mod.ENETUNREACH,
    errno_mod.EHOSTUNREACH,
    errno_mod.ECONNREFUSED,
    errno_mod.EAFNOSUPPORT,
    errno_mod.EADDRNOTAVAIL,
}
_NET_TYPES = {"gaierror", "herror", "ConnectionRefusedError", "ConnectionError", "timeout"}
_DISK_ERRNOS = {errno_mod.ENOSPC, errno_mod.EFBIG, errno_mod.EDQUOT}


def classify_exception(exc_type: str, err: int | None, message: str) -> FailureKind:
    """Kind of an exception raised by environment code inside the jail.

    ``exc_type`` is the class name, ``err`` the ``errno`` of an OSError (or None).
    """
    if exc_type == "ImportDeniedError":
        return FailureKind.IMPORT_DENIED
    if exc_type == "MemoryError":
        return FailureKind.MEMORY
    if exc_type in _NET_TYPES or err in _NET_ERRNOS:
        return FailureKind.NET_DENIED
    if exc_type == "BlockingIOError" or err == errno_mod.EAGAIN:
        return FailureKind.PROC_LIMIT  # fork/clone over RLIMIT_NPROC
    if err in _DISK_ERRNOS:
        return FailureKind.DISK_LIMIT
    if err in _FS_ERRNOS or exc_type in ("PermissionError", "FileNotFoundError"):
        return FailureKind.FS_DENIED
    return FailureKind.CRASH


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:  # not a signal this platform names
        return f"signal {num}"


def classify_exit(
    returncode: int,
    *,
    elapsed_s: float,
    session_limit_s: float,
    log_text: str = "",
    log_bytes: int = 0,
    log_limit_bytes: int = 0,
    env_busy_s: float | None = None,
) -> Failure:
    """Classify the jailed interpreter's death from nsjail's exit status and its log.

    nsjail reports a signalled child as ``128 + signo``. Its wall-clock limit and the memory
    cgroup both kill with SIGKILL (137), so those two are told apart by the elapsed time and
    the jail's own log line. The wall limit counts the time the session waits between calls
    too (for the model's turns, under many parallel episodes); ``env_busy_s`` is the time the
    environment itself took (its load and calls): under half the limit, the session expired
    on our side (``session_expired``), not the design's.
    """
    if returncode > 128:
        sig = returncode - 128
        name = _signal_name(sig)
        if sig == signal.SIGKILL:
            if "time limit" in log_text or elapsed_s >= session_limit_s - 0.5:
                if env_busy_s is not None and env_busy_s < session_limit_s / 2:
                    return Failure(
                        FailureKind.SESSION_EXPIRED,
                        f"session ran past its {session_limit_s:g}s wall limit waiting on the"
                        f" host (the environment's load and calls took {env_busy_s:.1f}s)",
                    )
                return Failure(
                    FailureKind.TIMEOUT, f"session ran past its {session_limit_s:g}s wall limit"
                )
            return Failure(
                FailureKind.MEMORY,
                "killed by SIGKILL without reaching the time limit (memory cgroup)",
            )
        if sig == signal.SIGXCPU:
            return Failure(FailureKind.TIMEOUT, "CPU time limit exceeded (SIGXCPU)")
        if sig == signal.SIGXFSZ:
            if log_limit_bytes and log_bytes >= log_limit_bytes:
                return Failure(
                    FailureKind.OUTPUT_LIMIT, "wrote more output than the log limit (SIGXFSZ)"
                )
            return Failure(
                FailureKind.DISK_LIMIT, "wrote a file larger than the size limit (SIGXFSZ)"
            )
        return Failure(FailureKind.EXITED, f"interpreter killed by {name}")
    return Failure(FailureKind.EXITED, f"interpreter exited with status {returncode}")
