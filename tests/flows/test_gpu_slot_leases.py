"""A GPU slot (``run.gpu_concurrency_limit``) held by a run that was SIGKILLed comes back on
Prefect's embedded server, and a training stage waiting for one says what it waits for.

Each run is a process of its own with the ``spade`` entry point's Prefect defaults and an
embedded server of its own on one PREFECT_HOME (as ``spade run`` then ``spade resume``): the
killed run is killed with its server, as when the machine goes. Before ``flows/gpu_limit.py``
kept leases in files and gave back the ones that ran out, the killed run's lease went with its
server, nothing ever gave its slot back, and the next run's training waited forever without a
word: the timeout below is the guard. The killed holder's lease is made to run out once the
next run has said it waits (``slot_driver expire``), not after the minute it would take.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.prefect_db import home_env

pytestmark = pytest.mark.timeout(900)  # the next run waited forever before the fix

REPO = Path(__file__).resolve().parents[2]
NAME = "spade-gpu"
MEMORY_LEASES = "prefect.server.concurrency.lease_storage.memory"


def _env(home: Path, **extra: str) -> dict[str, str]:
    # a waiting stage looks at the holders every repossessor interval (15 s by default)
    return home_env(home) | {"PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS": "1"} | extra


def _driver(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tests.flows.slot_driver", *args]
    # one stream, in the order said: its prints and Prefect's log lines
    return subprocess.run(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


@contextmanager
def _holding(
    run: str, env: dict[str, str], slots: int | None = None
) -> Iterator[subprocess.Popen[str]]:
    """A run holding a slot in task run ``run`` (once it said so), SIGKILLed with its embedded
    server at the latest when the block ends; with ``slots``, the limit sized first."""
    cmd = [sys.executable, "-m", "tests.flows.slot_driver", "hold", NAME, run]
    cmd += [str(slots)] if slots is not None else []
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its group: the run and the embedded server it started
    )
    try:
        said = []
        assert proc.stdout is not None
        for line in proc.stdout:  # until it holds the slot (or ends: a failure, shown)
            said.append(line)
            if line.strip() == "holding":
                break
        else:
            pytest.fail(f"the holding run ended without a slot:\n{''.join(said)}")
        yield proc
    finally:
        _kill(proc)


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):  # killed already
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _take_once_waiting(env: dict[str, str]) -> tuple[int, str]:
    """The next run's training (``take``), waiting for the slot until it has said so; then the
    killed holder's lease runs out (``expire``: what a minute without renewals does, the
    shortest lease Prefect takes) and the run goes on. Its exit code and what it said."""
    cmd = [sys.executable, "-m", "tests.flows.slot_driver", "take", NAME, "train_agent-r0001"]
    with subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            said = []
            for line in proc.stdout:  # until the stage says what it waits for (or the run ends)
                said.append(line)
                if "waiting" in line and "a slot" in line:
                    expired = _driver("expire", env=env)
                    assert expired.stdout.strip().endswith("expired 1"), expired.stdout
                    break
            said += proc.stdout.readlines()
            return proc.wait(), "".join(said)
        finally:
            _kill(proc)


def test_a_slot_held_by_a_killed_run_is_given_back_to_the_next_runs_training(tmp_path):
    env = _env(tmp_path / "prefect")
    with _holding("train_agent-r0000", env) as killed:
        _kill(killed)  # the run and its server, SIGKILL, holding the slot
    code, said = _take_once_waiting(env)
    assert code == 0, said
    assert "took" in said and said.strip().endswith("taken 0"), said
    # while the dead run's lease ran, the stage said what it waited for, naming the holder
    waiting = next(line for line in said.splitlines() if "waiting" in line and "a slot" in line)
    assert f"a slot of the GPU concurrency limit {NAME} (1 slot(s), 1 taken)" in waiting
    assert "held by task run 'train_agent-r0000' of flow run" in waiting
    assert "given back then if its process is gone" in waiting
    # then gave the slot back itself (the embedded server runs no repossessor), saying so
    assert (
        f"GPU concurrency limit {NAME}: gave back 1 slot(s) of task run 'train_agent-r0000'"
    ) in said
    assert said.index("gave back") < said.index("took")


def test_before_round_0_slots_no_lease_holds_are_given_back_and_a_live_runs_slot_kept(tmp_path):
    """A run through an embedded server that kept its leases in memory (as ``spade`` did
    before), killed: its slot has no lease anywhere. The start of the next run gives it back;
    the slot a live run holds, under a lease in files, stays taken."""
    env = _env(tmp_path / "prefect")
    memory = _env(tmp_path / "prefect", PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE=MEMORY_LEASES)
    live = _holding("train_agent-r0000", env, slots=2)
    with live, _holding("train_agent-r0007", memory) as killed:
        _kill(killed)
        done = _driver("free", NAME, env=env)
        assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert lines == [
        f"{NAME}: gave back 1 slot(s) that no lease holds (taken through a Prefect server that"
        " kept its leases in memory and is gone)",
        "taken 1",  # the live run's
    ], done.stdout
