"""A host-wide gate on jail starts: at most ``slots`` starts at once across every process.

Starting a jail is CPU work (nsjail, the interpreter, the design's imports); more starts at once
than cores only stretch each one past its ``start_timeout_s`` on a loaded host. A semaphore in
one process does not see the others: a Prefect worker running several flows, or a test run with
several xdist workers, starts cores x processes jails at once. The gate is ``slots`` lock files
in a folder of the user's own; holding a slot is holding an ``flock`` on its file. The kernel
drops a lock when its holder's file closes, so a process that dies (even by SIGKILL) frees its
slot. Each acquisition opens its own file description, so threads of one process contend too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from spade.errors import SandboxError

POLL_S = 0.02
"""How often a waiting start tries the slots again (s); a start takes ~0.1-1 s of CPU."""


def default_folder() -> Path:
    """The gate's folder for this user: ``<tmp>/spade-start-gate-<uid>``."""
    return Path(tempfile.gettempdir()) / f"spade-start-gate-{os.getuid()}"


def default_slots() -> int:
    """One start per core, at least two."""
    return max(2, os.cpu_count() or 1)


class StartGate:
    """``slots`` lock files in ``folder``; :meth:`held` waits for one and holds it."""

    def __init__(self, folder: Path | None = None, slots: int | None = None) -> None:
        self.folder = folder or default_folder()
        self.slots = default_slots() if slots is None else slots
        if self.slots < 1:
            raise ValueError(f"a gate needs at least one slot, got {self.slots}")
        self._ready = False

    def _prepare(self) -> None:
        """Make the folder (the user's own, not a link: it sits in a shared tmp)."""
        if self._ready:
            return
        with contextlib.suppress(FileExistsError):  # another process made it first
            self.folder.mkdir(mode=0o700, parents=True)
        st = self.folder.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise SandboxError(
                f"start gate folder {self.folder} is not a directory of uid {os.getuid()}"
            )
        self._ready = True

    def try_acquire(self) -> int | None:
        """An open file descriptor holding a free slot's lock, or None when all are held."""
        self._prepare()
        for slot in random.sample(range(self.slots), self.slots):  # spread waiters over slots
            fd = os.open(self.folder / f"slot-{slot}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # held by another start: try the next slot
                os.close(fd)
                continue
            return fd
        return None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Wait for a slot, hold it for the block, free it after (also on an exception)."""
        while (fd := self.try_acquire()) is None:
            time.sleep(POLL_S)
        try:
            yield
        finally:
            os.close(fd)  # closing the last descriptor of the file drops its lock
