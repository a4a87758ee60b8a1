"""Attack table and host-side observation helpers for the adversarial sandbox suite.

See ``test_attacks.py`` for what is tested; this module holds the table of attacks, the
policies they run under and the ways the host looks for anything that escaped a jail.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spade.records import Failure, FailureKind
from spade.sandbox import EnvFailure, JailedSession, SandboxPolicy, load_policy
from tests.leaks import HostSnapshot, child_pids, own_leaks, pid_namespace

K = FailureKind
ATTACK_DIR = Path(__file__).resolve().parent / "attacks"
REPO = Path(__file__).resolve().parents[2]
CODE_BREAKER = REPO / "spade" / "envs" / "examples" / "code_breaker.py"
CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")

DEFAULT_POLICY = load_policy()
JAIL_CALL_TIMEOUT_S = 2.0
SETTLE_S = 30.0  # the longest wait for what must come true (a jail reaped): a wait, not a bound
MOVE = "\\boxed{7}"


def with_changes(
    policy: SandboxPolicy,
    *,
    allow: list[str] | None = None,
    cgroup_parent: str | None = None,
    **limits: Any,
) -> SandboxPolicy:
    update: dict[str, Any] = {"limits": policy.limits.model_copy(update=limits)}
    if allow is not None:
        update["imports"] = policy.imports.model_copy(update={"allow": allow})
    if cgroup_parent is not None:
        update["cgroup_parent"] = cgroup_parent
    return policy.model_copy(update=update)


# The jail alone: the modules the attacks need are allowed (a policy may not allow every
# import), so only nsjail and the host-side session stand in the way.
ATTACK_MODULES = ["ctypes", "os", "signal", "socket", "subprocess", "threading", "time"]
OPEN_POLICY = with_changes(
    DEFAULT_POLICY,
    allow=[*DEFAULT_POLICY.imports.allow, *ATTACK_MODULES],
    call_timeout_s=JAIL_CALL_TIMEOUT_S,
)
# The runtime import guard off (an unvalidated copy: '*' is refused in every policy file):
# only to show that each reach_* route is real, so the guard is what stops it.
GUARD_OFF_POLICY = with_changes(OPEN_POLICY, allow=["*"])
# The checked-in policy with a shorter call deadline, for the repeat of the whole list.
FAST_POLICY = with_changes(DEFAULT_POLICY, call_timeout_s=JAIL_CALL_TIMEOUT_S)

_PLACEHOLDER = re.compile(r"__[A-Z]+__")


def attack(name: str, **subs: object) -> str:
    """The attack file's code with ``__KEY__`` placeholders replaced by ``subs[key]``."""
    code = (ATTACK_DIR / f"{name}.py").read_text(encoding="utf-8")
    for key, value in subs.items():
        code = code.replace(f"__{key.upper()}__", str(value))
    assert not (left := _PLACEHOLDER.findall(code)), f"{name}: unfilled placeholders {left}"
    return code


@dataclass(frozen=True)
class Attack:
    """One row of the attack table: what the verifier and the jail alone must answer."""

    id: str
    file: str
    verifier: FailureKind  # the verdict's failure kind with the checked-in policy
    check: str  # the verifier check that fails
    says: str  # a fragment of the verdict's reason
    jail: FailureKind | None  # the jail-alone kind; None: the call returns (contained otherwise)
    op: str | None = "reset"  # where the attack sits: "start", "reset", "step"; None: not run alone
    subs: dict[str, object] = field(default_factory=dict)
    default_policy: bool = False  # run alone with the checked-in policy (the runtime import guard)


ATTACKS = [
    Attack("net_outside_public", "net_outside", K.IMPORT_DENIED, "import_policy", "socket", K.NET_DENIED, subs={"host": "1.1.1.1"}),
    Attack("net_outside_private", "net_outside", K.IMPORT_DENIED, "import_policy", "socket", K.NET_DENIED, subs={"host": "10.255.255.1"}),
    Attack("net_loopback", "net_loopback", K.IMPORT_DENIED, "import_policy", "socket", K.NET_DENIED, subs={"port": 9}),
    Attack("read_shadow", "read_shadow", K.POLICY_DENIED, "import_policy", "'open'", K.FS_DENIED),
    Attack("read_checkout", "read_checkout", K.POLICY_DENIED, "import_policy", "'open'", K.FS_DENIED, subs={"path": REPO / "pyproject.toml"}),
    Attack("read_aws_credentials", "read_aws_credentials", K.POLICY_DENIED, "import_policy", "'open'", K.FS_DENIED, subs={"path": "/root/.aws/credentials"}),
    Attack("env_secrets", "env_secrets", K.IMPORT_DENIED, "import_policy", "os (line", None),
    Attack("write_code_dir", "write_outside", K.POLICY_DENIED, "import_policy", "'open'", K.FS_DENIED, subs={"path": "/code/pwn"}),
    Attack("write_runtime_dir", "write_outside", K.POLICY_DENIED, "import_policy", "'open'", K.FS_DENIED, subs={"path": "/opt/spade/pwn"}),
    Attack("write_root", "write_outside", K.POLICY_DENIED, "import_policy", "'open'", K.FS_DENIED, subs={"path": "/pwn"}),
    Attack("fill_tmpfs", "fill_tmpfs", K.POLICY_DENIED, "import_policy", "'open'", K.DISK_LIMIT, subs={"prefix": "spade-fill-"}),
    Attack("fork_bomb", "fork_bomb", K.IMPORT_DENIED, "import_policy", "os (line", K.PROC_LIMIT),
    Attack("memory_bytearray", "memory_bytearray", K.MEMORY, "reset_contract", "MemoryError", K.MEMORY),
    Attack("memory_list_growth", "memory_list_growth", K.MEMORY, "reset_contract", "", K.MEMORY),
    Attack("cpu_spin", "cpu_spin", K.TIMEOUT, "step_contract", "wall-clock limit", K.TIMEOUT, op="step"),
    Attack("sleep_forever", "sleep_forever", K.TIMEOUT, "step_contract", "wall-clock limit", K.TIMEOUT, op="step"),
    Attack("print_flood", "print_flood", K.OUTPUT_LIMIT, "step_contract", "log limit", K.OUTPUT_LIMIT, op="step"),
    Attack("huge_observation", "huge_observation", K.OUTPUT_LIMIT, "reset_contract", "reply larger", K.OUTPUT_LIMIT),
    Attack("os_exit", "os_exit", K.IMPORT_DENIED, "import_policy", "ctypes (line", K.EXITED, op="step"),
    Attack("abort", "abort", K.IMPORT_DENIED, "import_policy", "os (line", K.EXITED, op="step"),
    Attack("self_kill", "self_kill", K.IMPORT_DENIED, "import_policy", "signal (line", K.CONTRACT, subs={"signal": "SIGKILL"}),
    Attack("self_term", "self_kill", K.IMPORT_DENIED, "import_policy", "signal (line", K.CONTRACT, subs={"signal": "SIGTERM"}),
    Attack("self_segv", "self_kill", K.IMPORT_DENIED, "import_policy", "signal (line", K.CONTRACT, subs={"signal": "SIGSEGV"}),
    Attack("segfault", "segfault", K.IMPORT_DENIED, "import_policy", "ctypes (line", K.EXITED),
    Attack("daemon", "daemon", K.IMPORT_DENIED, "import_policy", "os (line", None),
    Attack("ctypes_system", "ctypes_system", K.IMPORT_DENIED, "import_policy", "ctypes (line", None, subs={"marker": "spade-ctypes-marker"}),
    Attack("subprocess_sh", "subprocess_sh", K.IMPORT_DENIED, "import_policy", "subprocess (line", K.FS_DENIED),
    Attack("import_pickle", "import_pickle", K.IMPORT_DENIED, "import_policy", "pickle (line", K.IMPORT_DENIED, op="start", default_policy=True),
    # Modules outside the allow-list reached through allowed ones (the runtime guard alone).
    Attack("reach_from_private", "reach_from_import", K.IMPORT_DENIED, "import_policy", "random._os (line 4): private", K.IMPORT_DENIED, op="start", subs={"module": "random", "taken": "_os"}, default_policy=True),
    Attack("reach_from_module", "reach_from_import", K.IMPORT_DENIED, "import_policy", "typing.sys (line 4): the module 'sys'", K.IMPORT_DENIED, op="start", subs={"module": "typing", "taken": "sys"}, default_policy=True),
    Attack("reach_from_builtins", "reach_from_import", K.IMPORT_DENIED, "import_policy", "random.__builtins__ (line 4): private", K.IMPORT_DENIED, op="start", subs={"module": "random", "taken": "__builtins__"}, default_policy=True),
    Attack("reach_attr_private_sys", "reach_attribute", K.IMPORT_DENIED, "import_policy", "collections._sys (line 12): private", K.IMPORT_DENIED, subs={"module": "collections", "attr": "_sys"}, default_policy=True),
    Attack("reach_attr_private_os", "reach_attribute", K.IMPORT_DENIED, "import_policy", "random._os (line 12): private", K.IMPORT_DENIED, subs={"module": "random", "attr": "_os"}, default_policy=True),
    Attack("reach_attr_module_sys", "reach_attribute", K.IMPORT_DENIED, "import_policy", "typing.sys (line 12): the module 'sys'", K.IMPORT_DENIED, subs={"module": "typing", "attr": "sys"}, default_policy=True),
    Attack("reach_attr_module_builtins", "reach_attribute", K.IMPORT_DENIED, "import_policy", "dataclasses.builtins (line 12): the module 'builtins'", K.IMPORT_DENIED, subs={"module": "dataclasses", "attr": "builtins"}, default_policy=True),
    # Kernel surface (seccomp) and the sum of several processes' memory (the memory cgroup;
    # run alone only by its own test, with a roomy deadline: touching 900 MiB takes time).
    Attack("raw_syscalls", "raw_syscalls", K.IMPORT_DENIED, "import_policy", "ctypes (line", None),
    Attack("memory_fork_sum", "memory_fork_sum", K.IMPORT_DENIED, "import_policy", "ctypes (line", None, op=None, subs={"children": 3, "mib": 300}),
    Attack("wrong_step_types", "wrong_step_types", K.CONTRACT, "step_contract", "5-tuple", K.CONTRACT, op="step"),
    Attack("infeasible", "infeasible", K.INFEASIBLE, "feasibility", "below the goal", None, op=None),
    Attack("trivial", "trivial", K.TRIVIAL, "non_triviality", "empty actions", None, op=None),
    Attack("nondeterministic", "nondeterministic", K.NONDETERMINISTIC, "determinism", "differ at step", None, op=None),
]  # fmt: skip


# What each reach_* attack gets back in a jail whose guard is off (GUARD_OFF_POLICY): proof that
# the route is real and that the guard is what stops it under the checked-in policy.
REACHED = {
    "reach_from_private": "<module 'os'",
    "reach_from_module": "<module 'sys'",
    "reach_from_builtins": "{'__name__': 'builtins'",
    "reach_attr_private_sys": "<module 'sys'",
    "reach_attr_private_os": "<module 'os'",
    "reach_attr_module_sys": "<module 'sys'",
    "reach_attr_module_builtins": "<module 'builtins'",
}


# -- host-side observation helpers ----------------------------------------------------------


def _uid(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Uid:")))


def jail_pidns(session: JailedSession) -> str:
    """The pid namespace of a live session's jailed interpreter (nsjail's only child)."""
    assert session._proc is not None  # the nsjail process, as a host Popen
    kids = child_pids(session._proc.pid)
    assert len(kids) == 1, f"nsjail {session._proc.pid} has children {kids}"
    ns = pid_namespace(kids[0])
    assert ns is not None and ns != pid_namespace(os.getpid()), (
        "the jail has no pid namespace of its own"
    )
    return ns


def procs_in_ns(ns: str) -> list[int]:
    """Host pids of every process in pid namespace ``ns``."""
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and pid_namespace(int(p.name)) == ns
    ]


def wait_for(predicate: Callable[[], object], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def wait_no_own_leaks(before: HostSnapshot, private: Path, timeout: float = SETTLE_S) -> list[str]:
    leaks: list[str] = []

    def clean() -> bool:
        nonlocal leaks
        leaks = own_leaks(before, private)
        return not leaks

    wait_for(clean, timeout)
    return leaks


def host_view(session: JailedSession, *parts: object) -> str:
    """Everything the host got back from a session: results, failure texts and its log."""
    texts = [session.log_tail(1 << 20) or ""]
    for part in parts:
        if isinstance(part, EnvFailure):
            part = part.failure
        if isinstance(part, Failure):
            texts += [part.reason, part.traceback or ""]
        else:
            texts.append(repr(part))
    return "\n".join(texts)


def files_named(name: str, root: Path) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", ".venv", "node_modules")]
        found += [Path(folder) / f for f in files if f == name]
    return found


@contextmanager
def jailed(code: str, policy: SandboxPolicy = OPEN_POLICY) -> Iterator[JailedSession]:
    """A started session that is always closed (also when start() itself fails)."""
    session = JailedSession(code, policy=policy)
    try:
        session.start()
        yield session
    finally:
        session.close()


def expect_failure(call: Callable[..., object], *args: object) -> EnvFailure:
    with pytest.raises(EnvFailure) as exc:
        call(*args)
    return exc.value


def assert_caller_healthy() -> None:
    """The calling process can still start a fresh session and play a step."""
    with JailedSession(
        CODE_BREAKER.read_text(), env_kwargs={"max_turns": 25}, policy=DEFAULT_POLICY
    ) as s:
        obs, info = s.reset(7)
        assert "secret code" in obs and info["max_turns"] == 25
        obs, reward, terminated, truncated, info = s.step("\\boxed{0123}")
    assert obs.startswith("0123:") and 0.0 <= reward <= 1.0 and info == {"turn": 1}
    assert isinstance(terminated, bool) and truncated is False
