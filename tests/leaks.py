"""What a jailed session could leave behind on the host: processes, cgroups, mounts, files.

Jails that other runs on the same host started are not ours: a run keeps its session folders
(and so its nsjail configs) under a private TMPDIR, and :func:`own_leaks` leaves out every live
nsjail whose config is elsewhere, with its processes and cgroups. A dead jail's cgroup cannot be
told apart from ours, and need not be: every session start sweeps those (an nsjail SIGKILLed by
anyone leaves them; :func:`spade.sandbox.cgroups.sweep_stale`), so the check sweeps too and
counts what is left."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from spade.sandbox.cgroups import detect_cgroups
from spade.sandbox.policy import load_policy


def _jail_processes() -> set[tuple[int, str]]:
    uid = load_policy().uid
    found = set()
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            text = Path(status).read_text()
            cmd = Path(status).with_name("cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # the process ended while we looked
            continue
        uids = next((ln.split()[1:] for ln in text.splitlines() if ln.startswith("Uid:")), [])
        if str(uid) in uids or "nsjail" in cmd:
            found.add((int(Path(status).parent.name), cmd.strip()))
    return found


@dataclass(frozen=True)
class HostSnapshot:
    processes: frozenset[tuple[int, str]]
    cgroups: frozenset[str]
    mounts: int
    jail_dirs: frozenset[str]

    @classmethod
    def take(cls) -> HostSnapshot:
        parent = f"/sys/fs/cgroup/memory/{load_policy().cgroup_parent}"
        return cls(
            processes=frozenset(_jail_processes()),
            cgroups=frozenset(glob.glob(f"{parent}/NSJAIL.*")),
            mounts=len(Path("/proc/self/mountinfo").read_text().splitlines()),
            jail_dirs=frozenset(
                glob.glob(os.path.join(os.environ.get("TMPDIR", "/tmp"), "spade-jail-*"))
            ),
        )

    def leaks_since(self, before: HostSnapshot) -> list[str]:
        out = []
        if extra := self.processes - before.processes:
            out.append(f"processes left: {sorted(extra)}")
        if extra := self.cgroups - before.cgroups:
            out.append(f"cgroups left: {sorted(extra)}")
        if self.mounts != before.mounts:
            out.append(f"host mount count changed: {before.mounts} -> {self.mounts}")
        if extra := self.jail_dirs - before.jail_dirs:
            out.append(f"session folders left: {sorted(extra)}")
        return out


def child_pids(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:  # gone
        return []


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:  # gone
        return None


def own_leaks(before: HostSnapshot, private: Path) -> list[str]:
    """``HostSnapshot`` leaks since ``before``, minus live jails that other runs started (their
    nsjail's config is not under the run's private TMPDIR), after the sweep a session start does
    (empty cgroups of dead jails). Anything that escaped a jail of ours, or that no live nsjail
    accounts for, still counts."""
    detect_cgroups(load_policy())  # sweeps the policy's parents
    after = HostSnapshot.take()
    foreign = {pid for pid, cmd in after.processes if "nsjail" in cmd and str(private) not in cmd}
    foreign_kids = {kid for pid in foreign for kid in child_pids(pid)}
    foreign_ns = {ns for kid in foreign_kids if (ns := pid_namespace(kid))}
    mine = HostSnapshot(
        processes=frozenset(
            (pid, cmd)
            for pid, cmd in after.processes
            if pid not in foreign and pid_namespace(pid) not in foreign_ns
        ),
        cgroups=frozenset(c for c in after.cgroups if int(c.rsplit(".", 1)[1]) not in foreign_kids),
        mounts=after.mounts,
        jail_dirs=after.jail_dirs,
    )
    return mine.leaks_since(before)
