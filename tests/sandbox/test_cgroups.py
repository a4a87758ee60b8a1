"""Cgroups that SIGKILLed jails leave behind are swept before the next jail starts; nothing a
live process may be using is touched."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from spade.envs.examples import example_paths
from spade.sandbox import JailedSession
from spade.sandbox.cgroups import detect_cgroups, sweep_stale
from tests.sandbox.attack_kit import SETTLE_S, wait_for

CODE_BREAKER = next(p for p in example_paths() if p.stem == "code_breaker").read_text()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_sweep_removes_only_empty_cgroups_whose_process_is_gone(tmp_path):
    stale, busy = tmp_path / f"NSJAIL.{_dead_pid()}", tmp_path / f"NSJAIL.{_dead_pid()}"
    alive = tmp_path / f"NSJAIL.{os.getpid()}"  # nsjail may be setting this one up
    others = [tmp_path / "NSJAIL.x", tmp_path / "user.slice"]
    for folder in (stale, busy, alive, *others):
        folder.mkdir()
    # a folder that cannot be removed, as the kernel refuses to remove a cgroup that still
    # holds a process (EBUSY; here ENOTEMPTY): left, and the sweep goes on
    (busy / "tasks").write_text("1\n")
    assert sweep_stale([tmp_path, tmp_path]) == [stale]  # v2: one parent for every controller
    assert sorted(tmp_path.iterdir()) == sorted([busy, alive, *others])
    assert sweep_stale([tmp_path]) == []


def _session_cgroups(parents: set[Path]) -> set[Path]:
    return {c for p in parents for c in p.glob("NSJAIL.*")}


@pytest.mark.sandbox
def test_a_killed_jails_cgroups_are_gone_once_the_next_jail_starts(policy):
    mine = policy.model_copy(update={"cgroup_parent": f"SPADE_sweep_{os.getpid()}"})
    parents = set(detect_cgroups(mine).parents.values())
    if not parents:
        pytest.skip(f"no cgroups for jails here: {detect_cgroups(mine).missing}")
    killed = JailedSession(CODE_BREAKER, policy=mine)
    try:
        killed.start()
        assert killed._proc is not None
        os.kill(killed._proc.pid, signal.SIGKILL)  # nsjail gets no chance to clean up
        killed._proc.wait()
        left = _session_cgroups(parents)
        assert left, "nsjail removed its cgroups although it was SIGKILLed"
        pids = {c.name.removeprefix("NSJAIL.") for c in left}
        gone = wait_for(  # the jail dies with nsjail
            lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), SETTLE_S
        )
        assert gone, f"the killed jail's process lives on: {pids}"
        with JailedSession(CODE_BREAKER, policy=mine) as running:
            now = _session_cgroups(parents)
            assert not now & left, f"not swept: {sorted(now & left)}"
            assert now, "the running jail's own cgroups were removed"
            assert running.reset(3)[0]  # and it works
    finally:
        killed.close()
        for parent in parents:
            wait_for(lambda: not list(parent.glob("NSJAIL.*")), SETTLE_S)  # noqa: B023 (waited here)
            parent.rmdir()
