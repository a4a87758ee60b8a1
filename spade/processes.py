"""Child processes the library starts and must stop for good: a free loopback port for one to
listen on, a process group stopped (SIGTERM, a grace time, SIGKILL, and whatever escaped the
group killed too), and groups that must not outlive the process that started them.

A managed vLLM server and a training launcher (torchrun, DeepSpeed's runner) run in sessions of
their own, so that a Ctrl-C reaches us, not them, and they are stopped as a group. A ``kill -9``
of the campaign, an OOM kill or a node agent ending the worker then leaves them running, holding
their port and GPUs, and the next start fails. :func:`guard_group` closes that gap twice over:

- a watcher, ``python -m spade.processes RECORD`` (:func:`main`), in a session of its own, polls
  its parent pid, which changes only once the whole launching process is gone (re-parented).
  ``PR_SET_PDEATHSIG`` would not do: it fires when the *thread* that forked ends, and servers
  are started from worker threads (``asyncio.to_thread``, executors) that may end while the
  process lives. It then stops the group as :func:`stop_process_group` would (SIGTERM first:
  vLLM and torchrun stop their own workers and ranks on it) and runs the record's clean-up
  command (a container's ``rm -f``);
- a record of the group, ``$SPADE_CACHE/processes/<host>-<pgid>.json`` (owner pid, group and
  watcher with their start times from ``/proc``, grace, clean-up), removed by
  :meth:`GroupGuard.close`. :func:`stop_orphaned_groups`, run before each launch, stops the
  group of every record of this machine whose owner is dead (waiting for its watcher first, if
  that still runs), and logs what it stopped: a watcher that was itself killed, or a resume that
  starts while the old server is still shutting down, does not make the launch fail on a port
  in use.

A pid alone is never trusted: a process is the recorded one only while its start time (clock
ticks since boot, ``/proc/<pid>/stat``) is the recorded one. Standard library only, psutil
imported where it is needed."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "GroupGuard",
    "GroupRecord",
    "free_port",
    "group_alive",
    "guard_group",
    "records_root",
    "stop_orphaned_groups",
    "stop_process_group",
]

log = logging.getLogger(__name__)

PARENT_POLL_S = 0.2  # how often a watcher looks at its parent pid
GROUP_CHECK_POLLS = 25  # every 5 s it checks that the group still runs (a /proc scan)
WATCHER_SLACK_S = 15.0  # past its grace, a live watcher that has not stopped its group is helped


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process_group(proc: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """SIGTERM the process's group (it was started with start_new_session=True), wait, then
    SIGKILL the group and any descendant that escaped it (found with psutil beforehand)."""
    import psutil

    try:  # the leader may be gone already
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:  # a group that ignores SIGTERM past the grace time is killed
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):  # children that outlived the leader
        os.killpg(proc.pid, signal.SIGKILL)
    _gone, alive = psutil.wait_procs(descendants, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)


def group_alive(pgid: int) -> bool:
    """Whether a process group still has a live member.

    Zombies do not count: an orphaned worker that has exited waits for init to reap it, and
    some container inits never do. Without ``/proc`` any member counts.
    """
    if not Path("/proc/self/stat").exists():
        return _signal_group(pgid, 0)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:  # processes end while we look
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False if it no longer exists (or is not ours to signal)."""
    try:  # gone once its last member has exited; another user's if its number was reused
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _stat(pid: int) -> tuple[str, int] | None:
    """Process ``pid``'s state letter and start time (clock ticks after boot); None if there
    is no such process (or no ``/proc``)."""
    try:  # the process may be gone
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # stat's fields from the 3rd (state) on
    return fields[0], int(fields[19])  # the 22nd: starttime


def _live_start(pid: int) -> int | None:
    """The start time of ``pid`` if it is a live process (a zombie has ended); else None."""
    found = _stat(pid)
    return found[1] if found is not None and found[0] not in ("Z", "X") else None


def _boot_id() -> str:
    """This boot of this machine (pids and start times mean nothing across a reboot)."""
    try:  # Linux only; elsewhere there is no /proc to verify pids with anyway
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def records_root() -> Path:
    """``$SPADE_CACHE/processes`` (default ``~/.cache/spade/processes``): the records of the
    process groups this machine's processes started (:func:`guard_group`)."""
    return Path(os.environ.get("SPADE_CACHE") or "~/.cache/spade").expanduser() / "processes"


@dataclass
class GroupRecord:
    """A process group started by process ``owner``, with what it takes to stop it when the
    owner is gone: the grace its leader gets after SIGTERM and a command run after it (a
    container's ``rm -f``). Start times tell a recorded pid from a reused one."""

    what: str  # for the logs: "vLLM server on port 8000"
    host: str
    boot: str
    owner: int
    owner_start: int | None
    pgid: int  # the leader's pid (it was started with start_new_session=True)
    leader_start: int | None
    grace: float
    cleanup: list[str]
    log: str | None = None  # where the watcher writes (the server's or launcher's log)
    watcher: int | None = None
    watcher_start: int | None = None

    @classmethod
    def from_json(cls, text: str) -> GroupRecord:
        return cls(**json.loads(text))

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def describe(self) -> str:
        return f"{self.what} (process group {self.pgid}, started by pid {self.owner})"

    def group_runs(self) -> bool:
        """Whether the recorded group still has a live member. A live process with the
        leader's pid but another start time means the group is gone: a pid is not reused
        while a group of that number exists."""
        found = _stat(self.pgid)
        if found is not None and self.leader_start is not None and found[1] != self.leader_start:
            return False
        return group_alive(self.pgid)

    def owner_runs(self) -> bool:
        return _live_start(self.owner) == self.owner_start

    def watcher_runs(self) -> bool:
        return self.watcher is not None and _live_start(self.watcher) == self.watcher_start


class GroupGuard:
    """The watcher and the record of one process group (:func:`guard_group`). :meth:`close`
    ends both once the group has been stopped the normal way; idempotent."""

    def __init__(
        self, record: GroupRecord, path: Path | None, watcher: subprocess.Popen[bytes] | None
    ) -> None:
        self.record = record
        self.path = path
        self.watcher = watcher

    def close(self) -> None:
        watcher, self.watcher = self.watcher, None
        if watcher is not None:  # it holds nothing: SIGKILL is as good as anything
            watcher.kill()
            watcher.wait()
        path, self.path = self.path, None
        if path is not None:
            path.unlink(missing_ok=True)


def guard_group(
    proc: subprocess.Popen[Any],
    *,
    what: str,
    grace: float,
    cleanup: Sequence[str] = (),
    log_path: Path | None = None,
) -> GroupGuard:
    """Keep the group of ``proc`` (just started with ``start_new_session=True``, not waited
    for yet) from outliving this process: a watcher stops it once this process is gone, and a
    record lets :func:`stop_orphaned_groups` stop it if the watcher could not. ``grace``: how
    long its leader gets after SIGTERM; ``cleanup``: a command run once it is stopped;
    ``log_path``: where the watcher writes what it did. Close the guard after stopping the
    group. Neither the watcher nor the record failing stops the launch: each is logged."""
    own = os.getpid()
    leader = _stat(proc.pid)  # a zombie still holds its pid: its start time is its own
    record = GroupRecord(
        what=what,
        host=socket.gethostname(),
        boot=_boot_id(),
        owner=own,
        owner_start=_live_start(own),
        pgid=proc.pid,
        leader_start=leader[1] if leader is not None else None,
        grace=grace,
        cleanup=list(cleanup),
        log=str(log_path) if log_path is not None else None,
    )
    watcher = _start_watcher(record)
    if watcher is not None:
        record.watcher, record.watcher_start = watcher.pid, _live_start(watcher.pid)
    return GroupGuard(record, _write_record(record), watcher)


def _start_watcher(record: GroupRecord) -> subprocess.Popen[bytes] | None:
    """``python -m spade.processes RECORD`` in a session of its own (a signal aimed at our
    group, a terminal's Ctrl-C, does not end it), writing to the record's log."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[1])  # the watcher imports this module, from here
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "spade.processes", record.to_json()]
    try:  # without a watcher the record is the one guard left: the launch goes on
        with contextlib.ExitStack() as stack:
            out: Any = subprocess.DEVNULL
            if record.log is not None:
                out = stack.enter_context(open(record.log, "ab"))
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
    except OSError as exc:
        log.warning("no watcher for %s: %s", record.describe(), exc)
        return None


def _write_record(record: GroupRecord) -> Path | None:
    root = records_root()
    path = root / f"{record.host}-{record.pgid}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    try:  # the record is the second guard: a cache that cannot be written does not stop a launch
        root.mkdir(parents=True, exist_ok=True)
        tmp.write_text(record.to_json())
        tmp.rename(path)  # atomic: a sweep never reads half a record
    except OSError as exc:
        log.warning("cannot record %s under %s: %s", record.describe(), root, exc)
        return None
    return path


def _stop_group(record: GroupRecord, say: Any) -> None:
    """Stop the recorded group as :func:`stop_process_group` does a child's: SIGTERM (vLLM
    and torchrun stop their own workers and ranks on it), SIGKILL after the grace, then the
    leader's descendants that escaped the group (torchrun's ranks run in sessions of their
    own), found beforehand; then the clean-up command. ``say(text)``: report."""
    import psutil

    try:  # the leader may have exited, leaving the rest of its group
        descendants = psutil.Process(record.pgid).children(recursive=True)
    except psutil.Error:
        descendants = []
    _signal_group(record.pgid, signal.SIGTERM)
    deadline = time.monotonic() + record.grace
    while time.monotonic() < deadline and record.group_runs():
        time.sleep(0.05)
    if record.group_runs():
        say(f"{record.describe()} outlived its {record.grace:g} s grace: SIGKILL")
        _signal_group(record.pgid, signal.SIGKILL)
    _gone, alive = psutil.wait_procs(descendants, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    _clean_up(record, say)


def _clean_up(record: GroupRecord, say: Any) -> None:
    if not record.cleanup:
        return
    try:  # best effort: a runtime that cannot be run has nothing left to remove
        subprocess.run(
            record.cleanup,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=max(record.grace, 10.0),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        say(f"{' '.join(record.cleanup)} failed: {exc}")


def stop_orphaned_groups() -> list[str]:
    """Stop every recorded group of this machine whose owner is gone (a killed campaign's
    server or training ranks); what was stopped, each also logged as a warning. A group whose
    watcher still runs is given the watcher's grace (and some) to go first. Records of a
    group that ended are removed; those of a live owner, or another machine, are left."""
    root = records_root()
    if not root.is_dir() or not Path("/proc/self/stat").exists():
        return []  # nothing recorded, or no /proc to verify a pid with: nothing is touched
    host, boot = socket.gethostname(), _boot_id()
    stopped: list[str] = []
    for path in sorted(root.glob("*.json")):
        try:  # its owner may remove it while we look
            with path.open("r") as held:
                fcntl.flock(held, fcntl.LOCK_EX)  # one sweep at a time handles a record
                if os.fstat(held.fileno()).st_nlink == 0:
                    continue  # removed while we waited for the lock
                try:  # a record is written whole (renamed into place): unreadable is foreign
                    record = GroupRecord.from_json(held.read())
                except (ValueError, TypeError) as exc:
                    log.warning("removing unreadable process record %s: %s", path, exc)
                    path.unlink()
                    continue
                if record.host != host:
                    continue  # another machine's, on a shared cache
                if record.boot == boot and record.owner_runs():
                    continue  # its owner stops it
                if record.boot == boot and _orphan_stopped(record):
                    stopped.append(record.describe())
                path.unlink()
        except FileNotFoundError:
            continue
    return stopped


def _orphan_stopped(record: GroupRecord) -> bool:
    """Stop the group of a record whose owner is gone; whether anything was left to stop."""
    if not record.group_runs():
        if not record.watcher_runs():
            _clean_up(record, log.warning)  # a container whose client was killed with us
        return False
    log.warning("%s outlived its owner: stopping it", record.describe())
    if record.watcher_runs():  # already at it: a second SIGTERM could cut torchrun's own stop
        deadline = time.monotonic() + record.grace + WATCHER_SLACK_S
        while time.monotonic() < deadline and record.group_runs():
            time.sleep(0.1)
    if record.group_runs():
        _stop_group(record, log.warning)
    return True


def _say(text: str) -> None:
    """A watcher's report, in the log of the group it watches."""
    print(f"=== spade: {text}", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    """The watcher (:func:`guard_group`): ``python -m spade.processes RECORD_JSON``. Waits while
    its parent, the record's owner, lives and the group runs; stops the group once the owner
    is gone (it is then our parent no more: a re-parented process's ppid changes)."""
    args = sys.argv[1:] if argv is None else list(argv)
    record = GroupRecord.from_json(args[0])
    polls = 0
    while os.getppid() == record.owner:
        time.sleep(PARENT_POLL_S)
        polls += 1
        if polls % GROUP_CHECK_POLLS == 0 and not record.group_runs():
            return  # it ended, and its owner has not closed us yet: nothing left to guard
    if record.group_runs():
        _say(f"pid {record.owner} is gone: stopping {record.describe()}")
        _stop_group(record, _say)
        _say(f"stopped {record.describe()}")
    else:
        _clean_up(record, _say)


if __name__ == "__main__":
    main()
