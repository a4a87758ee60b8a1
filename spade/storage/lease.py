"""A lease in the object store: one holder at a time for a key (one run per campaign id).

The lease object (JSON: owner, host, pid, acquired, expires) is taken atomically and renewed by
its holder every third of its life; a second taker gets :class:`LeaseHeldError` naming the
holder. A lease whose holder stopped renewing is taken over once it expired, or at once when its
holder is a process of this host that is gone (a run killed by SIGKILL).

Atomicity. Local folder: every read-decide-write runs under an exclusive ``flock`` of a side
file next to the lease (the kernel drops it when its process dies). S3 and compatible stores:
conditional writes, ``If-None-Match: *`` to create and ``If-Match: <etag>`` to renew or take
over, so of two racing writers one wins; release deletes the object if its etag is still ours.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from spade.errors import LeaseHeldError, StorageError
from spade.storage.store import TMP_PREFIX, ObjectStore, atomic_write, json_bytes

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holder:
    """Who holds a lease, until when (``expires``: seconds since the epoch)."""

    owner: str
    host: str
    pid: int
    acquired: float
    expires: float

    def describe(self) -> str:
        left = self.expires - time.time()
        return (
            f"{self.owner} (pid {self.pid} on {self.host}, since"
            f" {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(self.acquired))},"
            f" lease expires in {max(left, 0):.0f} s unless renewed)"
        )

    def gone(self) -> bool:
        """Expired, or a process of this host that no longer exists."""
        if self.expires <= time.time():
            return True
        if self.host != socket.gethostname():
            return False
        try:  # signal 0 only asks whether the process exists
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # exists, another user's
            return False
        return False


def _parse(data: bytes | None) -> Holder | None:
    if data is None:
        return None
    try:  # a torn or foreign lease object: nobody holds it
        return Holder(**json.loads(data))
    except (ValueError, TypeError) as exc:
        logger.warning("unreadable lease object (%s): treated as free", exc)
        return None


class Lease:
    """The lease on ``key`` in ``store``, for ``ttl_s`` seconds at a time.

    ``with lease:`` takes it (LeaseHeldError if another holder has it), renews it in a daemon
    thread while the block runs and releases it at the end.
    """

    def __init__(
        self, store: ObjectStore, key: str, ttl_s: float, what: str = "", holder: str = ""
    ) -> None:
        self.store, self.key, self.ttl_s = store, key, ttl_s
        self.what = what or store.url(key)
        # ``holder`` names the run (e.g. a Prefect flow run) in a second taker's error, which
        # gives the host and pid from the lease's own fields; the suffix keeps owners unique
        token = uuid.uuid4().hex[:8]
        self.owner = (
            f"{holder} [{token}]" if holder else f"{socket.gethostname()}:{os.getpid()}:{token}"
        )
        self.path = store._path(key)
        self._etag: str | None = None  # remote stores: the version we wrote last
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: str | None = None  # why the renewal thread gave up, if it did

    def _holder(self) -> Holder:
        now = time.time()
        return Holder(self.owner, socket.gethostname(), os.getpid(), now, now + self.ttl_s)

    # -- local folder: flock around read-decide-write --------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        folder, name = os.path.split(self.path)
        os.makedirs(folder, exist_ok=True)
        fd = os.open(os.path.join(folder, f"{TMP_PREFIX}{name}.lock"), os.O_RDWR | os.O_CREAT)
        try:  # the lock file stays (cheap, never listed); the lock goes with the descriptor
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read_local(self) -> Holder | None:
        try:  # absent: free
            with open(self.path, "rb") as f:
                return _parse(f.read())
        except FileNotFoundError:
            return None

    def _take_local(self, renew: bool) -> None:
        with self._locked():
            current = self._read_local()
            if renew and (current is None or current.owner != self.owner):
                raise LeaseHeldError(f"lost the lease on {self.what} to {current}")
            if current and current.owner != self.owner and not current.gone():
                raise LeaseHeldError(f"{self.what} is held by {current.describe()}")
            atomic_write(self.store.fs, self.path, json_bytes(asdict(self._holder())))

    def _release_local(self) -> None:
        with self._locked():
            current = self._read_local()
            if current and current.owner == self.owner:
                os.unlink(self.path)

    # -- object stores: conditional writes --------------------------------------------------

    def _put(self, **condition: str) -> bool:
        """Write our holder record if ``condition`` holds; False if another write won."""
        try:  # a failed precondition is how a lost race shows (an OSError from s3fs)
            out = self.store.fs.pipe_file(
                self.path, json_bytes(asdict(self._holder())), **condition
            )
        except OSError as exc:
            logger.info("conditional write of %s refused: %r", self.what, exc)
            return False
        self._etag = (out or {}).get("ETag")
        return True

    def _read_remote(self) -> tuple[Holder | None, str | None]:
        self.store.fs.invalidate_cache(self.path)
        try:  # etag first: if the object changes before we read it, the If-Match fails
            etag = self.store.fs.info(self.path).get("ETag")
            return _parse(bytes(self.store.fs.cat_file(self.path))), etag
        except FileNotFoundError:
            return None, None

    def _take_remote(self, renew: bool) -> None:
        if renew:
            if self._etag is None or not self._put(IfMatch=self._etag):
                raise LeaseHeldError(f"lost the lease on {self.what} to {self._read_remote()[0]}")
            return
        if self._put(mode="create"):
            return
        current, etag = self._read_remote()
        if current is not None and not current.gone():
            raise LeaseHeldError(f"{self.what} is held by {current.describe()}")
        ok = self._put(IfMatch=etag) if etag else self._put(mode="create")
        if not ok:
            raise LeaseHeldError(f"{self.what} is held by {self._read_remote()[0]}")
        if current is not None:
            logger.warning("took over the stale lease on %s from %s", self.what, current.owner)

    def _release_remote(self) -> None:
        current, etag = self._read_remote()
        if current and current.owner == self.owner and etag == self._etag:
            self.store.fs.rm(self.path)

    # -- the lease --------------------------------------------------------------------------

    def check_free(self) -> None:
        """LeaseHeldError naming the holder if another live holder has the lease now (a look,
        not a claim: :meth:`acquire` is what excludes)."""
        current = self._read_local() if self.store.local else self._read_remote()[0]
        if current is not None and current.owner != self.owner and not current.gone():
            raise LeaseHeldError(f"{self.what} is held by {current.describe()}")

    def acquire(self) -> None:
        """Take the lease; LeaseHeldError naming the holder if another live holder has it."""
        try:  # a store failure is a StorageError naming the lease, not a raw OSError
            (self._take_local if self.store.local else self._take_remote)(False)
        except OSError as exc:
            raise StorageError(
                f"cannot take the lease {self.store.url(self.key)}: {exc!r}"
            ) from exc

    def renew(self) -> None:
        """Extend the lease; LeaseHeldError if another holder took it meanwhile."""
        (self._take_local if self.store.local else self._take_remote)(True)

    def release(self) -> None:
        """Give the lease up (if it is still ours)."""
        (self._release_local if self.store.local else self._release_remote)()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:  # a failed renewal is retried at the next tick; a lost lease ends the loop
                self.renew()
            except LeaseHeldError as exc:
                self.lost = str(exc)
                logger.error("%s", exc)
                return
            except (OSError, StorageError) as exc:
                logger.warning("renewing the lease on %s failed (%r); retrying", self.what, exc)

    def __enter__(self) -> Lease:
        self.acquire()
        self._thread = threading.Thread(target=self._renew_loop, name="lease", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:  # an unreachable store leaves the lease to expire; the run's own error matters more
            self.release()
        except (OSError, StorageError) as err:
            logger.warning("could not release the lease on %s: %r", self.what, err)
