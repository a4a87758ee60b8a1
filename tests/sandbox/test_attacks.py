"""Adversarial designs: every attack is rejected by the verifier AND contained by the jail alone.

One attack per file under ``attacks/`` (placeholders such as ``__PORT__`` are filled in here).
Two layers are tested separately for each attack:

(a) ``verify(code)`` with the checked-in policy rejects it with the expected failure kind at the
    expected check (the static checks for imports and forbidden names, otherwise the first
    runtime check the attack meets);
(b) where the static layer would catch it, the jail alone (the modules the attacks need
    allowed, ``OPEN_POLICY``; sessions never run the static checks) contains it: the expected
    kind, and
    a fact observed on the host that nothing escaped. Attacks that stay inside Python (modules
    reached through allowed ones, ``reach_*``) meet the runtime import guard instead, with the
    checked-in policy. That guard and the static checks are defence in depth; the jail is the
    security boundary.

After every test the caller must still be healthy: a fresh session plays code_breaker.

This module's sessions keep their folders in a private TMPDIR, so the leak checks attribute
jails to this module even when other test runs share the host: a leftover is "ours" unless it
belongs to a live nsjail that another run started (see :func:`own_leaks`).
"""

from __future__ import annotations

import ast
import errno
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spade.records import FailureKind
from spade.sandbox import EnvFailure, JailedSession, SandboxPolicy, jail
from spade.sandbox.cgroups import detect_cgroups
from spade.verify import verify
from tests.leaks import HostSnapshot, child_pids
from tests.sandbox.attack_kit import (
    ATTACK_DIR,
    ATTACKS,
    CGROUP_MEMORY,
    CODE_BREAKER,
    DEFAULT_POLICY,
    FAST_POLICY,
    GUARD_OFF_POLICY,
    JAIL_CALL_TIMEOUT_S,
    MOVE,
    OPEN_POLICY,
    REACHED,
    REPO,
    SETTLE_S,
    Attack,
    K,
    _uid,
    assert_caller_healthy,
    attack,
    expect_failure,
    files_named,
    host_view,
    jail_pidns,
    jailed,
    procs_in_ns,
    wait_for,
    wait_no_own_leaks,
    with_changes,
)

pytestmark = pytest.mark.sandbox


def test_attack_table_covers_every_attack_file():
    assert {a.file for a in ATTACKS} == {p.stem for p in ATTACK_DIR.glob("*.py")}
    assert set(REACHED) == {a.id for a in ATTACKS if a.file.startswith("reach_")}


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def private_tmpdir() -> Iterator[Path]:
    """Session folders of this module go here (world-traversable, like the default /tmp)."""
    root = Path(tempfile.mkdtemp(prefix="spade-attacks-"))
    root.chmod(0o755)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(root))
        mp.setattr(tempfile, "tempdir", str(root))
        yield root
    left = sorted(p.name for p in root.iterdir())
    shutil.rmtree(root, ignore_errors=True)
    assert not left, f"left in the private TMPDIR: {left}"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def caller_stays_healthy() -> Iterator[None]:
    """After every attack the caller still plays, and holds no more file descriptors or threads
    than before it (a session's pipes and reader threads end with the session)."""
    fds, threads = _open_fds(), threading.active_count()
    yield
    assert_caller_healthy()
    settled = wait_for(lambda: _open_fds() <= fds and threading.active_count() <= threads, SETTLE_S)
    assert settled, (
        f"caller holds {_open_fds()} fds (had {fds}), {threading.active_count()} threads"
        f" (had {threads})"
    )


@dataclass
class Listener:
    port: int
    accepted: list[tuple[Any, bytes]]


@pytest.fixture
def loopback_listener() -> Iterator[Listener]:
    """A TCP listener on the host's 127.0.0.1 that records (at most 100) connections."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.1)
    listener = Listener(server.getsockname()[1], [])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set() and len(listener.accepted) < 100:
            try:
                conn, addr = server.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            with conn:
                conn.settimeout(0.5)
                try:
                    data = conn.recv(1024)
                except OSError:
                    data = b""
                listener.accepted.append((addr, data))

    thread = threading.Thread(target=serve, name="loopback-listener", daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
        assert not thread.is_alive()


@pytest.fixture(scope="module")
def memory_cgroup() -> Iterator[tuple[SandboxPolicy, Path | None]]:
    """The open policy under a cgroup parent of our own, so its peak usage is ours alone (and
    a roomy call deadline: touching 512 MiB on a busy host must not turn into a timeout)."""
    policy = with_changes(
        OPEN_POLICY, cgroup_parent=f"SPADE_attacks_{os.getpid()}", call_timeout_s=10.0
    )
    parent = CGROUP_MEMORY / policy.cgroup_parent
    found = detect_cgroups(policy)  # creates the parents (memory, pids, cpu) when it can
    yield policy, parent if found.version == 1 and found.memory else None
    left = []
    for where in set(found.parents.values()):
        wait_for(lambda: not list(where.glob("NSJAIL.*")), SETTLE_S)  # noqa: B023 (waited here)
        left += list(where.glob("NSJAIL.*"))
        where.rmdir()
    assert not left, f"session cgroups left: {left}"


# -- (a) the full verifier --------------------------------------------------------------------


@pytest.mark.parametrize("atk", ATTACKS, ids=lambda a: a.id)
def test_verifier_rejects(atk: Attack, policy):
    code = attack(atk.file, **atk.subs)
    verdict = verify(code, policy=policy)
    assert not verdict.accepted
    assert verdict.failure is not None, verdict.to_dict()
    assert verdict.failure.kind is atk.verifier, verdict.to_dict()
    assert verdict.failed_check == atk.check, verdict.to_dict()
    assert atk.says in verdict.failure.reason, verdict.to_dict()
    if atk.check == "import_policy":  # rejected before anything ran
        assert [c.name for c in verdict.checks] == ["parse", "import_policy"]
    if atk.verifier is K.TIMEOUT:  # cut at the call deadline, and nothing ran after it
        assert verdict.checks[-1].name == atk.check and not verdict.checks[-1].passed
        assert verdict.checks[-1].seconds >= DEFAULT_POLICY.limits.call_timeout_s


# -- (b) the jail alone ----------------------------------------------------------------------


@pytest.mark.parametrize("host", ["1.1.1.1", "10.255.255.1"])
def test_network_to_outside_is_unreachable(host: str):
    with jailed(attack("net_outside", host=host)) as s:
        exc = expect_failure(s.reset, 1)
        seen = host_view(s, exc)
    assert exc.failure.kind is K.NET_DENIED and not exc.fatal
    # ENETUNREACH, not a connect timeout: the jail's network namespace has no route at all,
    # so no packet left it.
    assert "Network is unreachable" in exc.failure.reason
    assert "connected" not in seen


def test_network_to_host_loopback_never_arrives(loopback_listener: Listener):
    # Positive control: the listener does see a connection from the host itself.
    with socket.create_connection(("127.0.0.1", loopback_listener.port), timeout=2) as conn:
        conn.sendall(b"control\n")
    assert wait_for(lambda: len(loopback_listener.accepted) == 1, SETTLE_S)
    with jailed(attack("net_loopback", port=loopback_listener.port)) as s:
        exc = expect_failure(s.reset, 1)
    assert exc.failure.kind is K.NET_DENIED and not exc.fatal
    # The jail's 127.0.0.1 is its own loopback, where nothing listens.
    assert "Connection refused" in exc.failure.reason
    time.sleep(0.3)
    assert [data for _, data in loopback_listener.accepted] == [b"control\n"]


def test_reading_etc_shadow_finds_nothing():
    """The jail cannot open /etc/shadow (/etc is not mounted), and none of the host's shadow
    lines reach anything the design can see. Where this process cannot read /etc/shadow (not
    root) there is nothing to compare with: the test skips, saying so, after the first check."""
    try:
        secrets = [ln for ln in Path("/etc/shadow").read_text().splitlines() if len(ln) >= 8]
    except OSError as exc:
        secrets, unreadable = [], f"{exc!r}"
    else:
        unreadable = ""
    with jailed(attack("read_shadow")) as s:
        exc = expect_failure(s.reset, 1)
        seen = host_view(s, exc)
    assert exc.failure.kind is K.FS_DENIED and not exc.fatal
    assert "No such file or directory: '/etc/shadow'" in exc.failure.reason  # /etc is not mounted
    if unreadable or not secrets:
        pytest.skip(
            "the host's /etc/shadow is unreadable here or holds no line to look for"
            f" ({unreadable or 'no line of 8 characters'}): the jail's failure was checked, not"
            " that no secret reached its view"
        )
    assert not [ln for ln in secrets if ln in seen]


def test_reading_the_project_checkout_finds_nothing():
    target = REPO / "pyproject.toml"
    content = [ln for ln in target.read_text().splitlines() if len(ln) >= 12]
    assert content and os.stat(target).st_mode & 0o004  # world-readable on the host
    with jailed(attack("read_checkout", path=target)) as s:
        exc = expect_failure(s.reset, 1)
        seen = host_view(s, exc)
    assert exc.failure.kind is K.FS_DENIED and not exc.fatal
    assert f"No such file or directory: '{target}'" in exc.failure.reason
    assert not [ln for ln in content if ln in seen]


def test_reading_aws_credentials_finds_nothing(private_tmpdir: Path):
    secret = f"spade-aws-secret-{uuid.uuid4().hex}"
    home = Path(tempfile.mkdtemp(prefix="home-", dir=private_tmpdir))
    try:
        # World-readable all the way down: only the jail's mount namespace can hide it.
        home.chmod(0o755)
        (home / ".aws").mkdir(mode=0o755)
        creds = home / ".aws" / "credentials"
        creds.write_text(
            f"[default]\naws_access_key_id = AKIATEST\naws_secret_access_key = {secret}\n"
        )
        creds.chmod(0o644)
        with jailed(attack("read_aws_credentials", path=creds)) as s:
            exc = expect_failure(s.reset, 1)
            seen = host_view(s, exc)
    finally:
        shutil.rmtree(home)
    assert exc.failure.kind is K.FS_DENIED and not exc.fatal
    assert "No such file or directory" in exc.failure.reason
    assert secret not in seen


def test_environment_secrets_are_not_inherited(monkeypatch: pytest.MonkeyPatch):
    secrets = {
        "AWS_SECRET_ACCESS_KEY": f"aws-{uuid.uuid4().hex}",
        "SPADE_TEST_SECRET": f"spade-{uuid.uuid4().hex}",
    }
    for key, value in secrets.items():
        monkeypatch.setenv(key, value)
    with jailed(attack("env_secrets")) as s:
        obs, info = s.reset(1)  # the attack "succeeds": it reads its environment
        seen = host_view(s, obs, info)
    assert not [v for v in secrets.values() if v in seen]
    assert ast.literal_eval(obs) == OPEN_POLICY.env  # exactly the policy's variables


@pytest.mark.parametrize("target", ["/code/pwn", "/opt/spade/pwn", "/pwn"])
def test_writing_outside_tmpfs_is_refused(target: str):
    host_paths = [Path("/pwn"), Path("/opt/spade/pwn"), Path("/code/pwn")]
    existed = {p: p.exists() for p in host_paths}
    with jailed(attack("write_outside", path=target)) as s:
        exc = expect_failure(s.reset, 1)
        assert s._files is not None  # the session's host folder (code, config, logs)
        in_session = list(s._files.root.rglob("pwn"))
    assert exc.failure.kind is K.FS_DENIED and not exc.fatal
    assert "Read-only file system" in exc.failure.reason
    assert not in_session
    assert not files_named("pwn", REPO)
    assert {p: p.exists() for p in host_paths} == existed


def test_filling_tmpfs_hits_its_size(private_tmpdir: Path):
    prefix = f"spade-fill-{uuid.uuid4().hex[:8]}-"
    with jailed(attack("fill_tmpfs", prefix=prefix)) as s:
        exc = expect_failure(s.reset, 1)
        assert s._files is not None
        folder_bytes = sum(p.stat().st_size for p in s._files.root.rglob("*") if p.is_file())
        after = s.step(MOVE)  # the interpreter survives a full /tmp
    assert exc.failure.kind is K.DISK_LIMIT and not exc.fatal
    assert "No space left on device" in exc.failure.reason
    assert after == ("ok", 1.0, True, False, {})
    assert folder_bytes < 1 << 20  # none of the 16 MiB landed in the session's folder
    for tmp in {Path("/tmp"), private_tmpdir, Path(tempfile.gettempdir())}:
        assert not list(tmp.glob(prefix + "*"))  # the jail's /tmp is a private tmpfs


def test_fork_bomb_is_capped():
    with jailed(attack("fork_bomb")) as s:
        exc = expect_failure(s.reset, 1)
        ns = jail_pidns(s)
        in_jail = procs_in_ns(ns)
        uids = {_uid(pid) for pid in in_jail}
    assert exc.failure.kind is K.PROC_LIMIT and not exc.fatal
    assert "BlockingIOError" in exc.failure.reason
    assert 2 <= len(in_jail) <= OPEN_POLICY.limits.processes
    assert uids == {OPEN_POLICY.uid}
    assert wait_for(lambda: not procs_in_ns(ns), SETTLE_S), procs_in_ns(ns)


def test_fork_bomb_does_not_starve_other_sessions(policy):
    """RLIMIT_NPROC is counted per jail (each has its own user namespace), not per host uid:
    while one jail's bomb holds its whole quota of uid-65534 processes, another jail can
    still start, fork and play."""
    limit = OPEN_POLICY.limits.processes
    with jailed(attack("fork_bomb")) as bomb:
        exc = expect_failure(bomb.reset, 1)
        assert exc.failure.kind is K.PROC_LIMIT
        ns = jail_pidns(bomb)
        # The bomb's copies keep forking until each one hits the limit: it holds its quota.
        assert wait_for(lambda: len(procs_in_ns(ns)) == limit, SETTLE_S), procs_in_ns(ns)
        bomb_uids = {_uid(pid) for pid in procs_in_ns(ns)}
        with JailedSession(CODE_BREAKER.read_text(), policy=policy) as other:
            other.reset(7)
            obs, *_ = other.step("\\boxed{0123}")
        with jailed(attack("daemon")) as forker:
            spawned, info = forker.reset(1)  # a fork in another jail
        still = procs_in_ns(ns)
    assert obs.startswith("0123:")
    assert spawned.startswith("spawned daemon") and info["daemon"] > 0
    assert bomb_uids == {OPEN_POLICY.uid}  # the same host uid as every other jail
    assert len(still) == limit


def test_session_after_fork_bomb_is_dead_or_in_sync():
    with jailed(attack("fork_bomb")) as s:
        exc = expect_failure(s.reset, 1)
        if exc.fatal:
            return
        assert s.step(MOVE) == ("ok", 1.0, True, False, {})


@pytest.mark.parametrize("name", ["memory_bytearray", "memory_list_growth"])
def test_memory_bombs_are_capped(name: str, memory_cgroup: tuple[SandboxPolicy, Path | None]):
    """A 10 GB bytearray is refused up front by RLIMIT_AS (a MemoryError, the jail lives on,
    its pages never touched); a list grown page by page is killed by the session's memory
    cgroup at its limit. Without a cgroup-v1 memory hierarchy the cgroup's part cannot be
    checked: the list's case skips, and the bytearray's skips after its MemoryError check."""
    policy, parent = memory_cgroup
    if parent is None and name == "memory_list_growth":
        pytest.skip("no cgroup-v1 memory hierarchy here: no memory cgroup to kill the jail")
    if parent is not None:
        (parent / "memory.max_usage_in_bytes").write_text("0")
    with jailed(attack(name), policy) as s:
        exc = expect_failure(s.reset, 1)
    assert exc.failure.kind is K.MEMORY  # a kill at the call deadline would be a TIMEOUT
    limit = policy.limits.cgroup_memory_mb << 20
    peak = int((parent / "memory.max_usage_in_bytes").read_text()) if parent else None
    if name == "memory_bytearray":
        # RLIMIT_AS refuses the allocation up front: a MemoryError, and the jail lives on.
        assert not exc.fatal and exc.failure.reason.startswith("MemoryError")
        if peak is None:
            pytest.skip(
                "no cgroup-v1 memory hierarchy here: the MemoryError was checked, not that the"
                " 10 GB were never touched (no memory cgroup to read the peak from)"
            )
        assert peak < 64 << 20  # the 10 GB were never touched
    else:
        # Pages really touched: the memory cgroup (512 MiB, under RLIMIT_AS) kills the jail.
        assert exc.fatal and "memory cgroup" in exc.failure.reason
        assert peak is not None and limit - (64 << 20) < peak <= limit + (8 << 20)


@pytest.mark.attack
def test_processes_whose_sum_exceeds_the_memory_cgroup_are_contained(
    memory_cgroup: tuple[SandboxPolicy, Path | None],
):
    """Each of three children stays under RLIMIT_AS; together they would hold 900 MiB. The
    session's memory cgroup (512 MiB, swap off) holds their sum: the kernel kills a child, the
    others finish, and the session never held more than its limit."""
    policy, parent = memory_cgroup
    if parent is None:
        pytest.skip("no cgroup-v1 memory hierarchy here: RLIMIT_AS alone bounds each process")
    lim, children, mib = policy.limits, 3, 300
    assert mib < lim.address_space_mb and children * mib > lim.cgroup_memory_mb
    code = attack("memory_fork_sum", children=children, mib=mib)
    with jailed(code, with_changes(policy, cgroup_memory_mb=0)) as s:  # control: no cgroup
        uncapped, _ = s.reset(1)
    assert uncapped == "[0, 0, 0]"  # RLIMIT_AS alone let the three hold 900 MiB together
    (parent / "memory.max_usage_in_bytes").write_text("0")
    with jailed(code, policy) as s:
        obs, info = s.reset(1)
        after = s.step(MOVE)  # the session itself lives on
    peak = int((parent / "memory.max_usage_in_bytes").read_text())
    assert -signal.SIGKILL in info["codes"], obs  # the OOM killer took at least one child
    assert set(info["codes"]) <= {0, -signal.SIGKILL}, obs
    assert peak <= (lim.cgroup_memory_mb << 20) + (8 << 20)
    assert after == ("ok", 1.0, True, False, {})


@pytest.mark.attack
def test_a_session_runs_under_memory_pids_and_cpu_cgroups(
    memory_cgroup: tuple[SandboxPolicy, Path | None],
):
    """On a cgroup-v1 host as root, a live session's interpreter sits in one cgroup per
    controller, with the policy's limits (memory+swap equal to memory: swap off)."""
    policy, parent = memory_cgroup
    if parent is None:
        pytest.skip("no cgroup-v1 memory hierarchy here")
    lim = policy.limits
    found = detect_cgroups(policy)
    assert found.version == 1 and set(found.parents) == {"memory", "pids", "cpu"}, found
    with jailed(attack("daemon"), policy) as s:
        s.reset(1)
        assert s._proc is not None
        (interpreter,) = child_pids(s._proc.pid)
        own = {c: found.parents[c] / f"NSJAIL.{interpreter}" for c in found.parents}
        values = {
            f: (own[c] / f).read_text().strip()
            for c, f in [
                ("memory", "memory.limit_in_bytes"),
                ("memory", "memory.memsw.limit_in_bytes"),
                ("pids", "pids.max"),
                ("cpu", "cpu.cfs_quota_us"),
                ("cpu", "cpu.cfs_period_us"),
            ]
        }
        members = {c: set((own[c] / "cgroup.procs").read_text().split()) for c in own}
    mem = str(lim.cgroup_memory_mb << 20)
    assert values == {
        "memory.limit_in_bytes": mem,
        "memory.memsw.limit_in_bytes": mem,
        "pids.max": str(lim.cgroup_pids),
        "cpu.cfs_quota_us": str(lim.cgroup_cpu_ms_per_sec * 1000),
        "cpu.cfs_period_us": "1000000",
    }
    assert all(len(m) == 2 and str(interpreter) in m for m in members.values()), members


# probe -> (its errno under the jail's seccomp filter, the errno without the filter): each
# probe reaches the kernel without the filter; 0 means the call worked.
SECCOMP_PROBES = {
    "clone_newuser": (errno.EPERM, 0),
    "clone_newuser_fsopen": (errno.EPERM, 0),  # a new user+mount namespace, then fsopen there
    "clone3": (errno.ENOSYS, 0),
    "clone3_plain": (errno.ENOSYS, 0),  # so glibc falls back to clone, which is filtered
    "open_tree": (errno.EPERM, 0),
    "fsconfig": (errno.EPERM, errno.EINVAL),
    "mount_setattr": (errno.EPERM, errno.EINVAL),
    # These four check CAP_SYS_ADMIN first: EPERM for uid 65534 either way; what the filter
    # adds is that no namespace can grant it (clone_newuser_fsopen).
    "fsopen": (errno.EPERM, errno.EPERM),
    "fsmount": (errno.EPERM, errno.EPERM),
    "fspick": (errno.EPERM, errno.EPERM),
    "move_mount": (errno.EPERM, errno.EPERM),
    "io_uring_setup": (errno.EPERM, 0),
    "io_uring_enter": (errno.EPERM, errno.EBADF),
    "io_uring_register": (errno.EPERM, errno.EINVAL),
    "thread": (0, 0),  # threads and fork still work (clone without namespace flags)
    "fork": (0, 0),
}


@pytest.fixture(scope="module")
def syscall_probes(private_tmpdir: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The raw_syscalls attack's results in the jail, and (the control) in the same jail with
    its seccomp policy replaced by DEFAULT ALLOW."""
    code = attack("raw_syscalls")
    with jailed(code) as s:
        filtered = ast.literal_eval(s.reset(1)[0])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jail, "seccomp_policy", lambda policy: "DEFAULT ALLOW")
        with jailed(code) as s:
            unfiltered = ast.literal_eval(s.reset(1)[0])
    return filtered, unfiltered


@pytest.mark.attack
@pytest.mark.parametrize("probe", SECCOMP_PROBES)
def test_seccomp_closes_namespaces_new_mount_api_and_io_uring(
    probe: str, syscall_probes: tuple[dict[str, int], dict[str, int]]
):
    filtered, unfiltered = syscall_probes
    assert set(filtered) == set(unfiltered) == set(SECCOMP_PROBES)
    assert (filtered[probe], unfiltered[probe]) == SECCOMP_PROBES[probe]


@pytest.mark.parametrize("name", ["cpu_spin", "sleep_forever"])
def test_endless_step_is_cut_at_the_call_deadline(name: str):
    with jailed(attack(name)) as s:
        s.reset(1)
        ns = jail_pidns(s)
        t0 = time.monotonic()
        exc = expect_failure(s.step, MOVE)
        elapsed = time.monotonic() - t0
        alive = s.alive
        again = expect_failure(s.step, MOVE)  # a dead session answers at once, the same way
    assert exc.failure.kind is K.TIMEOUT and exc.fatal
    assert elapsed >= JAIL_CALL_TIMEOUT_S  # it ends only at the deadline (it never returns)
    assert not alive and again.failure == exc.failure and again.fatal
    assert wait_for(lambda: not procs_in_ns(ns), SETTLE_S), "the spinning jail is still running"


def test_print_flood_is_capped_by_the_log_limit():
    limit = OPEN_POLICY.limits.max_file_mb << 20
    with jailed(attack("print_flood")) as s:
        s.reset(1)
        exc = expect_failure(s.step, MOVE)
        assert s._files is not None
        log_bytes = s._files.stderr.stat().st_size
    assert exc.failure.kind is K.OUTPUT_LIMIT and not exc.fatal
    assert "File too large" in (exc.failure.traceback or "")  # RLIMIT_FSIZE stopped the writes
    assert limit - (64 << 10) <= log_bytes <= limit  # and no TIMEOUT: the limit stopped it


def test_huge_observation_is_cut_at_the_reply_cap():
    limit = OPEN_POLICY.limits.max_message_bytes
    with jailed(attack("huge_observation")) as s:
        exc = expect_failure(s.reset, 1)
        buffered = len(s._buf)  # what the host read of the 5 MiB reply before giving up
    assert exc.failure.kind is K.OUTPUT_LIMIT and exc.fatal
    assert f"reply larger than {limit} bytes" in exc.failure.reason
    assert limit < buffered <= limit + (1 << 16)


def test_os_exit_ends_the_session():
    with jailed(attack("os_exit")) as s:
        s.reset(1)
        exc = expect_failure(s.step, MOVE)
        alive = s.alive
    assert exc.failure.kind is K.EXITED and exc.fatal and not alive
    assert "exited with status 3" in exc.failure.reason


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM", "SIGSEGV"])
def test_deadly_signal_to_self_is_ignored_as_pid_1(sig: str):
    """The interpreter is pid 1 of the jail's pid namespace, and the kernel drops signals a
    namespace's init sends itself without a handler: os.kill returns None, which is no valid
    reset() result, and the jail keeps serving."""
    with jailed(attack("self_kill", signal=sig)) as s:
        exc = expect_failure(s.reset, 1)
        alive = s.alive
        after = s.step(MOVE)
    assert exc.failure.kind is K.CONTRACT and not exc.fatal
    assert "got None" in exc.failure.reason
    assert alive and after == ("ok", 1.0, True, False, {})


def test_abort_kills_the_interpreter_for_real():
    """os.abort() raises SIGABRT (dropped, as above), then glibc's abort() faults, and a fault
    is delivered even to a namespace's init: the interpreter really dies mid-call. The caller
    gets a classified failure, the jail's processes are gone, and (the autouse fixture) a fresh
    session still plays."""
    with jailed(attack("abort")) as s:
        s.reset(1)
        ns = jail_pidns(s)
        exc = expect_failure(s.step, MOVE)
        alive = s.alive
        again = expect_failure(s.step, MOVE)
    assert exc.failure.kind is K.EXITED and exc.fatal and not alive
    assert exc.failure.reason.startswith("interpreter killed by SIG")  # SIGSEGV here, or SIGABRT
    assert again.failure == exc.failure and again.fatal
    assert wait_for(lambda: not procs_in_ns(ns), SETTLE_S), procs_in_ns(ns)


def test_segfault_ends_the_session():
    with jailed(attack("segfault")) as s:
        exc = expect_failure(s.reset, 1)
        alive = s.alive
    assert exc.failure.kind is K.EXITED and exc.fatal and not alive
    assert "SIGSEGV" in exc.failure.reason


def test_daemon_does_not_outlive_the_session(private_tmpdir: Path):
    before = HostSnapshot.take()
    with jailed(attack("daemon")) as s:
        obs, info = s.reset(1)
        after = s.step(MOVE)
        ns = jail_pidns(s)
        assert s._proc is not None
        (interpreter,) = child_pids(s._proc.pid)
        daemons = [pid for pid in procs_in_ns(ns) if pid != interpreter]
        # The child calls setsid() after fork() returned in the parent: give it a moment.
        detached = wait_for(lambda: all(_session_id(d) == d for d in daemons), SETTLE_S)
        sessions = {pid: _session_id(pid) for pid in (interpreter, *daemons)}
        uids = {_uid(pid) for pid in (interpreter, *daemons)}
    assert obs == "spawned daemon 2" and info == {"daemon": 2}  # the interpreter is pid 1
    assert after == ("ok", 1.0, True, False, {})
    assert len(daemons) == 1 and uids == {OPEN_POLICY.uid} and detached
    assert sessions[daemons[0]] == daemons[0] != sessions[interpreter]  # setsid() worked
    assert wait_for(lambda: not procs_in_ns(ns), SETTLE_S), procs_in_ns(ns)
    assert not (leaks := wait_no_own_leaks(before, private_tmpdir, SETTLE_S)), leaks


def _session_id(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[3])  # field 6: session id


def test_ctypes_system_runs_nothing():
    marker = f"spade-ctypes-{uuid.uuid4().hex}"
    with jailed(attack("ctypes_system", marker=marker)) as s:
        obs, info = s.reset(1)
        seen = host_view(s, obs, info)
    # system() forks a shell that cannot exist in the jail: "exit 127" (command not found).
    assert info == {"rc": 127 << 8} and obs == f"system returned {127 << 8}"
    assert marker not in seen and "uid=" not in seen


def test_subprocess_finds_no_shell():
    with jailed(attack("subprocess_sh")) as s:
        exc = expect_failure(s.reset, 1)
        seen = host_view(s, exc)
    assert exc.failure.kind is K.FS_DENIED and not exc.fatal
    assert "No such file or directory: '/bin/sh'" in exc.failure.reason
    assert "uid=" not in seen


def test_disallowed_import_is_denied_by_the_runtime_guard(policy):
    session = JailedSession(
        attack("import_pickle"), policy=policy
    )  # the checked-in policy: guard active
    try:
        exc = expect_failure(session.start)
        alive = session.alive
    finally:
        session.close()
    assert exc.failure.kind is K.IMPORT_DENIED and exc.fatal and not alive
    assert "pickle" in exc.failure.reason


REACH_ATTACKS = [a for a in ATTACKS if a.id in REACHED]


@pytest.mark.parametrize("atk", REACH_ATTACKS, ids=lambda a: a.id)
def test_modules_reached_through_allowed_ones_are_denied_by_the_runtime_guard(atk: Attack):
    """Without static checks, the checked-in policy's import guard stops every route from an
    allowed module to one outside the allow-list; with the guard open, each route works."""
    code = attack(atk.file, **atk.subs)
    with jailed(code, GUARD_OFF_POLICY) as s:  # positive control: the route is real
        obs, _ = s.reset(1)
    assert obs.startswith("reached " + REACHED[atk.id]), obs
    name = f"{atk.subs['module']}.{atk.subs.get('taken', atk.subs.get('attr'))}"
    session = JailedSession(code, policy=DEFAULT_POLICY)
    try:
        exc = expect_failure(session.start) if atk.op == "start" else None
        if exc is None:
            session.start()
            exc = expect_failure(session.reset, 1)
        alive = session.alive
    finally:
        session.close()
    assert exc.failure.kind is K.IMPORT_DENIED and exc.fatal and not alive
    assert exc.failure.reason == f"imports outside the allow-list: {name}"


def test_failed_start_in_a_with_block_leaves_no_folder(private_tmpdir: Path, policy):
    """A design that does not load, used as a context manager: __enter__ cleans up itself."""
    before = set(private_tmpdir.glob("spade-jail-*"))
    try:
        with pytest.raises(EnvFailure), JailedSession(attack("import_pickle"), policy=policy):
            pass
        assert set(private_tmpdir.glob("spade-jail-*")) == before
    finally:
        for left in set(private_tmpdir.glob("spade-jail-*")) - before:
            shutil.rmtree(left)


# -- the whole list again, then nothing may be left behind ------------------------------------


def run_alone(atk: Attack, code: str) -> FailureKind | None:
    """Run one attack in a session (no static checks); the failure kind, or None if it ran."""
    session = JailedSession(code, policy=DEFAULT_POLICY if atk.default_policy else OPEN_POLICY)
    try:
        session.start()
        if atk.op in ("reset", "step"):
            session.reset(1)
        if atk.op == "step":
            session.step(MOVE)
    except EnvFailure as exc:
        return exc.failure.kind
    finally:
        session.close()
    return None


MEMORY_BOMB_POLICY = with_changes(DEFAULT_POLICY, call_timeout_s=SETTLE_S)


def test_whole_attack_list_leaves_nothing_behind(loopback_listener: Listener, private_tmpdir: Path):
    before = HostSnapshot.take()
    wrong = []
    for atk in ATTACKS:
        subs = dict(atk.subs)
        if "port" in subs:
            subs["port"] = loopback_listener.port
        code = attack(atk.file, **subs)
        # a memory bomb must meet the memory limit before the call's wall clock runs out: on a
        # loaded machine filling the cgroup took longer than FAST_POLICY's 2 s (a timeout,
        # not the memory verdict); the timeouts' own attacks keep the short limit
        policy = MEMORY_BOMB_POLICY if atk.verifier is K.MEMORY else FAST_POLICY
        verdict = verify(code, policy=policy)
        got = verdict.failure.kind if verdict.failure else None
        if verdict.accepted or got is not atk.verifier:
            wrong.append(f"{atk.id}: verifier {got}, expected {atk.verifier}")
        if atk.op is not None and (alone := run_alone(atk, code)) is not atk.jail:
            wrong.append(f"{atk.id}: jail alone {alone}, expected {atk.jail}")
    assert not wrong, wrong
    assert not (leaks := wait_no_own_leaks(before, private_tmpdir, SETTLE_S)), leaks
    assert loopback_listener.accepted == []
