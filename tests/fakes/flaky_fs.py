"""A flaky object store for tests: ``flaky://local/abs/path`` is the local folder ``/abs/path`` seen
through fsspec, except that writes of chosen keys fail (an OSError, as s3fs raises for a
dropped connection) a chosen number of times first. A true boundary fake: everything above the
filesystem (the store, the stages, Prefect's result storage) is the real code.

Not a LocalFileSystem (the store writes through ``pipe_file``, as it does on S3), so each failure
is one refused ``pipe_file``/``open(..., "wb")``.
"""

from __future__ import annotations

import fnmatch
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem


@dataclass
class Fault:
    """Fail writes of paths matching ``pattern`` (fnmatch) ``times`` times."""

    pattern: str
    times: int = 1
    failed: list[str] = field(default_factory=list)  # the paths refused, in order


PREFIX = "flaky://local"  # a host part: Prefect's RemoteFileSystem block wants one


class FlakyFS(DirFileSystem):
    protocol = "flaky"
    faults: ClassVar[list[Fault]] = []
    _lock: ClassVar[threading.Lock] = threading.Lock()
    cachable = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(path="/", fs=LocalFileSystem(auto_mkdir=True))
        self.path = ""  # paths pass through unchanged: absolute local paths

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        return path[len(PREFIX) :] if path.startswith(PREFIX) else path

    def _join(self, path: Any) -> Any:
        """Full ``flaky://`` URLs (Prefect's blocks pass them) become local paths too."""
        return self._strip_protocol(path)

    def unstrip_protocol(self, name: str) -> str:
        return f"{PREFIX}{name}"

    @classmethod
    def fail(cls, pattern: str, times: int = 1) -> Fault:
        fault = Fault(pattern, times)
        with cls._lock:
            cls.faults.append(fault)
        return fault

    @classmethod
    def reset(cls) -> None:
        with cls._lock:
            cls.faults.clear()

    def _maybe_fail(self, path: str) -> None:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and fnmatch.fnmatch(path, fault.pattern):
                    fault.times -= 1
                    fault.failed.append(path)
                    raise OSError(f"injected store failure writing {path}")

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail(self._strip_protocol(path))
        return super().pipe_file(path, value, *args, **kwargs)

    def open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode or "a" in mode:
            self._maybe_fail(self._strip_protocol(path))
        return super().open(path, mode, *args, **kwargs)


fsspec.register_implementation("flaky", FlakyFS, clobber=True)
