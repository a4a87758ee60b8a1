"""What the managed servers share: the launch logged, the log's tail, the context manager,
a launch that cannot start named as an InferenceError, and the health probe."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from spade.errors import InferenceError
from spade.inference.managed import ManagedServer, healthy, temp_path
from spade.processes import free_port


class Echo(ManagedServer):
    """A "server" that prints its lines and exits."""

    def __init__(self, cmd: list[str], log_path: Path) -> None:
        self.cmd, self.log_path, self._process = cmd, log_path, None

    def start(self) -> None:
        self._popen(self.cmd)
        assert self._process is not None
        self._process.wait(timeout=30)

    def stop(self) -> None:
        self._process = None


def test_the_launch_and_the_output_are_in_the_log_tail(tmp_path):
    cmd = [sys.executable, "-c", "print('one'); print('two')"]
    with Echo(cmd, tmp_path / "server.log") as server:
        assert server.pid is not None and not server.running
        assert server.log_tail(2) == "one\ntwo"
        assert server.log_tail().startswith("\n=== spade: launching ")
    assert server.pid is None


def test_a_missing_log_has_an_empty_tail_and_a_missing_executable_is_an_inference_error(
    tmp_path,
):
    server = Echo([str(tmp_path / "no-such-server")], tmp_path / "absent" / "server.log")
    assert server.log_tail() == ""
    server.log_path = tmp_path / "server.log"
    with pytest.raises(InferenceError, match="cannot launch"):
        server.start()


def test_health_probe_and_temp_path():
    with httpx.Client(timeout=1.0, trust_env=False) as client:
        assert not healthy(client, f"http://127.0.0.1:{free_port()}/health")  # refused
    path = temp_path("spade-test-", ".log")
    assert path.is_file() and path.name.startswith("spade-test-") and path.suffix == ".log"
    path.unlink()
