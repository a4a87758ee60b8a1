import errno
import signal

import pytest

from spade.records import FailureKind
from spade.sandbox.failures import classify_exception, classify_exit


@pytest.mark.parametrize(
    ("exc_type", "err", "kind"),
    [
        ("ImportDeniedError", None, FailureKind.IMPORT_DENIED),
        ("MemoryError", None, FailureKind.MEMORY),
        ("ConnectionRefusedError", errno.ECONNREFUSED, FailureKind.NET_DENIED),
        ("OSError", errno.ENETUNREACH, FailureKind.NET_DENIED),
        ("gaierror", None, FailureKind.NET_DENIED),
        ("BlockingIOError", errno.EAGAIN, FailureKind.PROC_LIMIT),
        ("OSError", errno.ENOSPC, FailureKind.DISK_LIMIT),
        ("OSError", errno.EFBIG, FailureKind.DISK_LIMIT),
        ("OSError", errno.EROFS, FailureKind.FS_DENIED),
        ("PermissionError", errno.EACCES, FailureKind.FS_DENIED),
        ("FileNotFoundError", errno.ENOENT, FailureKind.FS_DENIED),
        ("ValueError", None, FailureKind.CRASH),
        ("RecursionError", None, FailureKind.CRASH),
    ],
)
def test_classify_exception(exc_type, err, kind):
    assert classify_exception(exc_type, err, "msg") is kind


def test_classify_exit_tells_timeout_from_oom_by_time_and_log():
    kill = 128 + signal.SIGKILL
    assert classify_exit(kill, elapsed_s=1.0, session_limit_s=60).kind is FailureKind.MEMORY
    assert classify_exit(kill, elapsed_s=59.9, session_limit_s=60).kind is FailureKind.TIMEOUT
    log = "[I] pid=7 run time >= time limit (60 >= 60) (0 s). Killing it"
    assert (
        classify_exit(kill, elapsed_s=3.0, session_limit_s=60, log_text=log).kind
        is FailureKind.TIMEOUT
    )


def test_a_wall_limit_reached_while_the_environment_idled_is_the_hosts():
    """The wall limit counts the waits between calls (the model's turns): a session whose own
    load and calls took under half of it expired on our side; over half, the design's."""
    kill = 128 + signal.SIGKILL
    waited = classify_exit(kill, elapsed_s=60, session_limit_s=60, env_busy_s=2.5)
    assert waited.kind is FailureKind.SESSION_EXPIRED and "took 2.5s" in waited.reason
    busy = classify_exit(kill, elapsed_s=60, session_limit_s=60, env_busy_s=31.0)
    assert busy.kind is FailureKind.TIMEOUT
    oom = classify_exit(kill, elapsed_s=1.0, session_limit_s=60, env_busy_s=0.5)
    assert oom.kind is FailureKind.MEMORY  # not at the limit: the memory cgroup, as before


def test_classify_exit_other_signals_and_statuses():
    assert (
        classify_exit(128 + signal.SIGXCPU, elapsed_s=1, session_limit_s=60).kind
        is FailureKind.TIMEOUT
    )
    xfsz = 128 + signal.SIGXFSZ
    assert (
        classify_exit(xfsz, elapsed_s=1, session_limit_s=60, log_bytes=10, log_limit_bytes=10).kind
        is FailureKind.OUTPUT_LIMIT
    )
    assert (
        classify_exit(xfsz, elapsed_s=1, session_limit_s=60, log_bytes=1, log_limit_bytes=10).kind
        is FailureKind.DISK_LIMIT
    )
    segv = classify_exit(128 + signal.SIGSEGV, elapsed_s=1, session_limit_s=60)
    assert segv.kind is FailureKind.EXITED and "SIGSEGV" in segv.reason
    assert (
        classify_exit(3, elapsed_s=1, session_limit_s=60).reason
        == "interpreter exited with status 3"
    )
