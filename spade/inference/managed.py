"""What the model servers this process launches (vLLM, llama.cpp) share: a child process in a
session of its own whose output goes to a log file, its life as a context manager, the log's
last lines for error messages, and the health probe they are waited on with.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Self

import httpx

from spade.errors import InferenceError

LOG_TAIL_LINES = 40


class ManagedServer(ABC):
    """A server process launched by :meth:`start` (blocking until it is healthy) and stopped
    by :meth:`stop`; subclasses set ``log_path`` and ``_process`` (None until launched)."""

    log_path: Path
    _process: subprocess.Popen[bytes] | None

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:  # the log may not exist yet if the launch itself failed
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _popen(self, cmd: list[str], env: dict[str, str] | None = None) -> None:
        """Launch ``cmd`` with its output appended to the log, after a line naming it."""
        with self.log_path.open("ab") as log:
            log.write(f"\n=== spade: launching {' '.join(cmd)}\n".encode())
            log.flush()
            try:  # a missing or broken executable is a set-up error, reported as such
                self._process = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    # its own session and process group: a Ctrl-C in a terminal goes to us,
                    # not the server, and stop() can reach the server's workers
                    start_new_session=True,
                )
            except OSError as exc:
                raise InferenceError(f"cannot launch {cmd[0]!r}: {exc}") from exc


def healthy(client: httpx.Client, url: str) -> bool:
    """Whether ``url`` (a server's health endpoint) answers 200."""
    try:  # refused connections are normal while the server starts and loads its weights
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def temp_path(prefix: str, suffix: str) -> Path:
    """A new empty temporary file (a server's log or address file)."""
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix)
    os.close(fd)
    return Path(name)
