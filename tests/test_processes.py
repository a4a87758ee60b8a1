"""The records of the process groups this machine started (spade/processes.py): the sweep a
launch runs first stops only a group whose owner is dead and which is still the recorded one
(start times from /proc, not pids alone), on this machine. A killed campaign's server and
ranks, end to end: tests/inference/test_vllm_server.py and tests/training/test_launch.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from spade.processes import GroupRecord, guard_group, records_root, stop_orphaned_groups


def _rewrite(path: Path, record: GroupRecord, **changes: object) -> None:
    """The record as a process that has since gone would have left it."""
    path.write_text(json.dumps(json.loads(record.to_json()) | changes))


def test_the_sweep_stops_only_a_dead_owners_group_that_is_still_the_recorded_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path))
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    dead = subprocess.Popen(["true"])
    dead.wait()  # an owner that is gone (a process reusing its pid started later)
    guard = guard_group(sleeper, what="a sleeper", grace=5.0)
    try:  # never leave the sleeper or the watcher behind
        assert guard.path is not None and guard.path.parent == records_root()
        record, path = guard.record, guard.path
        assert record.leader_start is not None

        assert stop_orphaned_groups() == []  # its owner, this process, lives
        assert path.exists() and sleeper.poll() is None

        # the watcher is not what is tested here: as if it had been killed with its owner
        gone = {"owner": dead.pid, "watcher": None}
        _rewrite(path, record, **gone, host="another-node")  # a shared cache
        assert stop_orphaned_groups() == [] and path.exists() and sleeper.poll() is None

        _rewrite(path, record, **gone, leader_start=record.leader_start + 1)  # a reused pid
        assert stop_orphaned_groups() == [] and not path.exists() and sleeper.poll() is None

        _rewrite(path, record, **gone, boot="an-earlier-boot")  # nothing of it runs now
        assert stop_orphaned_groups() == [] and not path.exists() and sleeper.poll() is None

        _rewrite(path, record, **gone)
        with caplog.at_level("WARNING", logger="spade.processes"):
            stopped = stop_orphaned_groups()
        assert stopped == [f"a sleeper (process group {sleeper.pid}, started by pid {dead.pid})"]
        assert sleeper.wait() == -signal.SIGTERM and not path.exists()
        assert f"{stopped[0]} outlived its owner: stopping it" in caplog.text
    finally:
        sleeper.kill()
        sleeper.wait()
        guard.close()
    assert os.listdir(records_root()) == []
