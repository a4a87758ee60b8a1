"""A persistent jailed session against real nsjail."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from spade.envs.examples import example_paths
from spade.records import FailureKind
from spade.sandbox import EnvFailure, JailedSession
from spade.sandbox import session as session_module
from spade.sandbox.gate import StartGate

pytestmark = pytest.mark.sandbox

CODE_BREAKER = next(p for p in example_paths() if p.stem == "code_breaker").read_text()

ODD = """
import math
class OddEnv:
    def reset(self, seed=None):
        print("chatter on stdout must not corrupt the channel")
        return "start", {"obj": object(), "n": 1}
    def step(self, action):
        if action == "nan":
            return "x", math.nan, True, False, {}
        if action == "raise":
            raise ValueError("bad move")
        if action == "types":
            return 1, "a", None
        return "ok", 0.5, False, False, {}
    def solution(self):
        return {"neither": "actions nor an answer"}  # a bare 42 would be the answer \\boxed{42}
"""


def test_session_serves_an_episode_and_appends_the_hint(policy):
    with JailedSession(CODE_BREAKER, env_kwargs={"max_turns": 25}, policy=policy) as s:
        assert s.info is not None and s.info.class_name == "CodeBreakerEnv"
        assert (
            s.info.skill == "logical_deduction" and not s.info.tool_use and s.info.max_turns == 25
        )
        obs, info = s.reset(7, hint="think")
        assert obs.endswith("\n\nHINT: think") and info["max_turns"] == 25
        solution = s.solution()
        obs, reward, terminated, truncated, _ = s.step(solution[-1])  # the code itself
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert s.stats.calls == 4 and s.stats.start_s > 0
    assert not s.alive


def test_env_errors_are_classified_and_non_fatal(policy):
    with JailedSession(ODD, policy=policy) as s:
        obs, info = s.reset(0)
        assert obs == "start" and info["obj"].startswith("<object")  # non-JSON -> repr
        with pytest.raises(EnvFailure) as exc:
            s.step("raise")
        assert exc.value.failure.kind is FailureKind.CRASH and not exc.value.fatal
        assert "bad move" in (exc.value.failure.traceback or "")
        for action in ("nan", "types"):
            with pytest.raises(EnvFailure) as exc:
                s.step(action)
            assert exc.value.failure.kind is FailureKind.CONTRACT
        with pytest.raises(EnvFailure) as exc:
            s.solution()
        assert exc.value.failure.kind is FailureKind.CONTRACT
        assert s.step("fine")[1] == 0.5  # still alive after all that
        assert "chatter" in (s.log_tail() or "")


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("class Broken(:\n", FailureKind.SYNTAX),
        ("class NotAnEnvironment:\n    pass\n", FailureKind.CONTRACT),
        ("raise RuntimeError('at import')\n", FailureKind.CRASH),
        (
            "import pickle\nclass AEnv:\n    def reset(self): ...\n    def step(self, a): ...\n",
            FailureKind.IMPORT_DENIED,
        ),
    ],
)
def test_load_failures(code, kind, policy):
    session = JailedSession(code, policy=policy)
    with pytest.raises(EnvFailure) as exc:
        session.start()
    session.close()
    assert exc.value.failure.kind is kind and exc.value.fatal


def test_a_timeout_names_the_limit_that_ran_out_load_call_or_close(policy):
    """A load past ``start_timeout_s``, a call past ``call_timeout_s`` and a close past
    ``close_timeout_s`` each say which limit it was and its value (distinct values here, so one
    named for another is caught). A close that hangs is the design's: close() records it and
    ends the jail without raising."""
    code = "import time\nclass SEnv:\n    def __init__(self, **kw):\n        time.sleep({init})\n    def reset(self, seed=None):\n        time.sleep(60)\n    def step(self, a): ...\n    def close(self):\n        time.sleep(60)\n"
    limits = policy.limits.model_copy(
        update={"start_timeout_s": 1.5, "call_timeout_s": 0.5, "close_timeout_s": 0.7}
    )
    short = policy.model_copy(update={"limits": limits})
    # the sessions that must start do so under a roomy load limit (a loaded machine can take
    # longer than 1.5 s to start a jail); 60 s is named by nothing below
    started = short.model_copy(
        update={"limits": limits.model_copy(update={"start_timeout_s": 60.0})}
    )
    slow_load = JailedSession(code.format(init=60), policy=short)
    with pytest.raises(EnvFailure) as load:
        slow_load.start()
    slow_load.close()
    with (
        JailedSession(code.format(init=0), policy=started) as slow_reset,
        pytest.raises(EnvFailure) as call,
    ):
        slow_reset.reset(0)
    assert load.value.failure.kind is call.value.failure.kind is FailureKind.TIMEOUT
    assert "load's wall-clock limit (start_timeout_s: 1.5s)" in load.value.failure.reason
    assert "call's wall-clock limit (call_timeout_s: 0.5s)" in call.value.failure.reason
    slow_close = JailedSession(code.format(init=0), policy=started)
    slow_close.start()
    slow_close.close()
    assert slow_close.failure is not None and not slow_close.alive
    assert slow_close.failure.kind is FailureKind.TIMEOUT
    assert "close's wall-clock limit (close_timeout_s: 0.7s)" in slow_close.failure.reason


def test_calls_after_death_fail_fast_and_close_is_idempotent(policy):
    """After a timeout killed the jail, the next call fails at once with the same failure: it
    sends nothing on the channel, so it cannot wait for a reply (the session's own call
    counters, which every request on the channel moves, do not move), and it does not wait
    otherwise: it takes less than half the time of the call that waited for its deadline (a
    ratio of two calls in this test, not a bound in seconds: the failing call raises at once)."""
    code = "import time\nclass SEnv:\n    def reset(self, seed=None):\n        time.sleep(60)\n    def step(self, a): ...\n"
    short = policy.model_copy(
        update={"limits": policy.limits.model_copy(update={"call_timeout_s": 0.5})}
    )
    with JailedSession(code, policy=short) as s:
        with pytest.raises(EnvFailure) as exc:
            s.reset(0)
        assert exc.value.failure.kind is FailureKind.TIMEOUT and exc.value.fatal
        calls, timed = s.stats.calls, list(s.stats.call_s)
        assert calls == 2 and timed[-1] >= 0.5  # load, then the reset that waited its deadline
        t0 = time.perf_counter()
        with pytest.raises(EnvFailure) as again:
            s.step("x")
        took = time.perf_counter() - t0
        assert again.value.failure is exc.value.failure and again.value.fatal
        assert (s.stats.calls, list(s.stats.call_s)) == (calls, timed)  # nothing was sent
        assert took < timed[-1] / 2  # a generous ratio to the call that waited its deadline
    s.close()


def test_a_jail_that_cannot_start_is_a_loud_sandbox_error(policy):
    from spade.errors import SandboxError

    broken = policy.model_copy(update={"readonly_binds": [], "interpreter": "/nonexistent/python"})
    # nsjail sometimes kills the child before it logs its [F] line (about 1 start in 6 here):
    # several starts, so the parent's own line is what tells it apart from a design's death.
    for _ in range(12):
        session = JailedSession(CODE_BREAKER, policy=broken)
        try:
            with pytest.raises(SandboxError, match="could not start") as err:
                session.start()
            assert "Failed to mount mandatory point: '/nonexistent/python'" in str(err.value)
        finally:  # also after a request the dead jail never read (a broken pipe on close)
            session.close()
        assert session._files is None


def guard_off(policy):
    """``policy`` with every import allowed: the jail alone is the barrier (jail-only tests)."""
    return policy.model_copy(update={"imports": policy.imports.model_copy(update={"allow": ["*"]})})


def test_seccomp_denies_namespace_and_ptrace_syscalls(policy):
    policy = guard_off(policy)
    code = (
        "import ctypes\n"
        "class SEnv:\n"
        "    def reset(self, seed=None):\n"
        "        libc = ctypes.CDLL(None, use_errno=True)\n"
        "        r1 = libc.unshare(0x10000000); e1 = ctypes.get_errno()\n"
        "        r2 = libc.syscall(101, 0, 0, 0, 0); e2 = ctypes.get_errno()\n"
        "        return f'{r1} {e1} {r2} {e2}', {}\n"
        "    def step(self, a):\n"
        "        return '', 0.0, True, False, {}\n"
    )
    with JailedSession(code, policy=policy) as s:
        assert s.reset(0)[0] == "-1 1 -1 1"  # unshare(CLONE_NEWUSER) and ptrace: EPERM


def test_string_hashing_is_fixed_across_sessions(policy):
    """PYTHONHASHSEED reaches the jail, so set order cannot make designs nondeterministic."""
    code = (
        "class HEnv:\n"
        "    def reset(self, seed=None):\n"
        "        return str(hash('spade')) + ' ' + ''.join({'a', 'b', 'c', 'd', 'e', 'f'}), {}\n"
        "    def step(self, a):\n"
        "        return '', 0.0, True, False, {}\n"
    )
    seen = set()
    for _ in range(3):
        with JailedSession(code, policy=policy) as s:
            seen.add(s.reset(0)[0])
    assert len(seen) == 1


def test_datetime_strptime_works_under_the_import_guard(policy):
    """strptime imports _strptime from C code, on the design's behalf: the policy allows it."""
    code = (
        "import datetime\n"
        "class DEnv:\n"
        "    def reset(self, seed=None):\n"
        "        return datetime.datetime.strptime('2024-03-05', '%Y-%m-%d').strftime('%j'), {}\n"
        "    def step(self, a):\n"
        "        return '', 0.0, True, False, {}\n"
    )
    with JailedSession(code, policy=policy) as s:
        assert s.reset(0)[0] == "065"


def test_the_jail_finds_a_fresh_bytecode_cache_of_its_runtime(policy):
    """The runtime is compiled for the jail's Python once per process (``compile_runtime``):
    inside the jail each runtime module has a ``.pyc`` whose header matches its source (mtime
    and size), which the interpreter then loads instead of compiling the source again."""
    policy = guard_off(policy)
    code = (
        "import importlib.util, os, struct, sys\n"
        "class PycEnv:\n"
        "    def reset(self, seed=None):\n"
        "        found = {}\n"
        "        for name in ('spade.envs', 'spade.envs.base', 'spade.envs.reference'):\n"
        "            src = sys.modules[name].__file__\n"
        "            pyc = importlib.util.cache_from_source(src)\n"
        "            if not os.path.exists(pyc):\n"
        "                found[name] = 'missing'\n"
        "                continue\n"
        "            with open(pyc, 'rb') as fh:\n"
        "                flags, mtime, size = struct.unpack('<4xIII', fh.read(16))\n"
        "            st = os.stat(src)\n"
        "            fresh = (flags, mtime, size) == (0, int(st.st_mtime) & 0xFFFFFFFF, st.st_size)\n"
        "            found[name] = 'fresh' if fresh else 'stale'\n"
        "        return repr(sorted(found.items())), {}\n"
        "    def step(self, a):\n"
        "        return '', 0.0, True, False, {}\n"
    )
    with JailedSession(code, policy=policy) as s:
        names = ["spade.envs", "spade.envs.base", "spade.envs.reference"]
        assert s.reset(0)[0] == repr(sorted((n, "fresh") for n in names))


def test_at_most_the_gates_count_of_jails_start_at_once(policy, monkeypatch, tmp_path):
    """A burst of starts queues at the gate (its clock not yet running), each started."""
    gate, starts = 2, 8
    monkeypatch.setattr(session_module, "START_GATE", StartGate(tmp_path / "gate", gate))
    lock, counts = threading.Lock(), {"in": 0, "peak": 0}
    real_start = JailedSession._start

    def counted(self):
        with lock:
            counts["in"] += 1
            counts["peak"] = max(counts["peak"], counts["in"])
        try:
            return real_start(self)
        finally:
            with lock:
                counts["in"] -= 1

    monkeypatch.setattr(JailedSession, "_start", counted)
    together = threading.Barrier(starts)

    def start_one(_: int) -> str:
        together.wait()
        with JailedSession(CODE_BREAKER, policy=policy) as s:
            assert s.info is not None
            return s.info.class_name

    with ThreadPoolExecutor(starts) as pool:
        names = list(pool.map(start_one, range(starts)))
    assert names == ["CodeBreakerEnv"] * starts and 1 <= counts["peak"] <= gate
