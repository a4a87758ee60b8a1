"""What a jailed session could leave behind on the host: processes, cgroups, mounts, files."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

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
