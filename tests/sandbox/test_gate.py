"""The host-wide start gate: slots held across threads and processes, freed on death."""

import os
import signal
import subprocess
import sys
import threading

import pytest

from spade.errors import SandboxError
from spade.sandbox.gate import StartGate

HOLDER = """
import sys, time
from pathlib import Path
from spade.sandbox.gate import StartGate
fd = StartGate(Path(sys.argv[1]), 1).try_acquire()
print("held" if fd is not None else "busy", flush=True)
time.sleep(600)
"""


def test_a_held_slot_is_busy_to_another_gate_on_the_folder_until_freed(tmp_path):
    one, other = StartGate(tmp_path / "g", 1), StartGate(tmp_path / "g", 1)
    fd = one.try_acquire()
    assert fd is not None
    assert other.try_acquire() is None  # same folder, another open file: the lock is seen
    os.close(fd)
    again = other.try_acquire()
    assert again is not None
    os.close(again)


def test_a_slot_held_by_another_process_is_freed_when_it_is_killed(tmp_path):
    """The gate spans processes (a worker per flow), and a SIGKILLed holder frees its slot."""
    folder = tmp_path / "g"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert StartGate(folder, 1).try_acquire() is None
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    fd = StartGate(folder, 1).try_acquire()
    assert fd is not None
    os.close(fd)


def test_held_waits_for_the_slot_and_gives_it_back_when_its_block_raises(tmp_path):
    gate = StartGate(tmp_path / "g", 1)
    fd = gate.try_acquire()
    assert fd is not None
    entered = threading.Event()

    def wait_then_fail() -> None:
        with pytest.raises(RuntimeError), gate.held():
            entered.set()
            raise RuntimeError("a start that failed")

    waiter = threading.Thread(target=wait_then_fail)
    waiter.start()
    os.close(fd)  # the waiter gets in only now
    waiter.join()
    assert entered.is_set()
    fd = gate.try_acquire()  # the failed block gave its slot back
    assert fd is not None
    os.close(fd)


def test_a_folder_that_is_not_the_users_own_directory_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "g").symlink_to(target)  # in a shared tmp, a link planted by someone else
    with pytest.raises(SandboxError, match="not a directory of uid"):
        StartGate(tmp_path / "g", 1).try_acquire()


def test_a_gate_without_slots_is_refused(tmp_path):
    with pytest.raises(ValueError, match="at least one slot"):
        StartGate(tmp_path / "g", 0)
