"""A persistent jailed session: one nsjail'd interpreter serving one environment.

The jail starts once, loads the code, then answers ``reset``/``step``/``solution``/``tools``
over JSON lines, so a whole episode pays the jail start once. Every call has a wall-clock
deadline and a reply-size cap enforced here; the jail enforces memory, CPU, process, file
and session-time limits. Whatever goes wrong comes back as an :class:`EnvFailure` carrying a
classified :class:`Failure`; nothing a design does can raise anything else to the caller.
Replies are read by :mod:`spade.sandbox.replies` (total, linear in the reply) and tool schemas
checked by :mod:`spade.sandbox.schemas`, on every call: the design shares its interpreter with
the jail's server and can rewrite it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from spade.errors import SandboxError
from spade.metrics import prom
from spade.records import Failure, FailureKind
from spade.sandbox.cgroups import detect_cgroups, require_memory_bound
from spade.sandbox.failures import EnvFailure, classify_exit
from spade.sandbox.gate import StartGate
from spade.sandbox.jail import (
    CODE_DIR,
    JailFiles,
    build_config,
    compile_runtime,
    nsjail_binary,
    write_config,
)
from spade.sandbox.policy import SandboxPolicy
from spade.sandbox.replies import (
    REWARD_RANGE,
    BadReply,
    SessionInfo,
    check_reset,
    check_step,
    contract,
    envelope,
    failure_from_error,
    session_info,
)
from spade.sandbox.schemas import check_tools

CODE_NAME = "env.py"
# nsjail's own line when the jail's set-up failed before the interpreter ran
_NOT_LAUNCHED = "Couldn't launch the child process"
# Starts queue at a host-wide gate (spade.sandbox.gate: a burst of 72 starts at once had pushed
# starts past ``start_timeout_s`` on a loaded machine), so the limit's clock times the jail's own
# start; one gate object per process, its slots shared with every other process of the user.
START_GATE = StartGate()


@dataclass
class SessionStats:
    start_s: float = 0.0
    calls: int = 0
    call_s: deque[float] = field(default_factory=lambda: deque(maxlen=1000))  # recent calls
    call_total_s: float = 0.0  # every call's time: the environment's share of the session


class _Dead(Exception):
    """Internal: the channel closed, timed out or overflowed; ``failure`` says which."""

    def __init__(self, failure: Failure) -> None:
        self.failure = failure


class JailedSession:
    """One environment's code, loaded in its own jail, driven call by call.

    Use as a context manager; ``start()`` happens on entry. ``env_kwargs`` go to the
    environment's constructor (``max_turns`` is dropped if the class does not take it).
    """

    def __init__(
        self,
        code: str,
        *,
        policy: SandboxPolicy,
        env_kwargs: dict[str, Any] | None = None,
        class_name: str | None = None,
        reward_range: tuple[float, float] = REWARD_RANGE,
    ) -> None:
        self.code = code
        self.reward_range = reward_range
        self.policy = policy
        self.env_kwargs = dict(env_kwargs or {})
        self.class_name = class_name
        self.info: SessionInfo | None = None
        self.stats = SessionStats()
        self.failure: Failure | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._files: JailFiles | None = None
        self._buf = bytearray()
        self._started_at = 0.0
        self._call_t0: float | None = None  # the call in flight's start (perf_counter)
        self._next_id = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> JailedSession:
        try:
            self.start()
        except BaseException:  # a design that does not load: leave nothing behind, re-raise
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def age_s(self) -> float:
        """Seconds since the jail was launched (its wall limit counts from there)."""
        return time.monotonic() - self._started_at if self._proc is not None else 0.0

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self.failure is None

    def start(self) -> SessionInfo:
        """Start the jail and load the code, at most :data:`START_GATE`'s slots at once on this
        host; raise EnvFailure if the code does not load."""
        with START_GATE.held():
            return self._start()

    def _start(self) -> SessionInfo:
        t0 = time.perf_counter()
        cgroups = detect_cgroups(self.policy)
        require_memory_bound(self.policy, cgroups)  # SandboxError: no memory cgroup here
        compile_runtime(self.policy.interpreter)  # once per process and interpreter
        self._files = JailFiles(Path(tempfile.mkdtemp(prefix="spade-jail-")))
        self._files.root.chmod(0o755)
        self._files.code_dir.mkdir(mode=0o755)
        (self._files.code_dir / CODE_NAME).write_text(self.code, encoding="utf-8")
        (self._files.code_dir / CODE_NAME).chmod(0o644)
        cfg = build_config(self.policy, self._files, cgroups=cgroups)
        argv = [str(nsjail_binary(self.policy)), *write_config(cfg, self._files)]
        with open(self._files.stderr, "wb") as err:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,  # keep terminal signals (Ctrl-C) for the host to handle
                env={"PATH": "/usr/bin:/bin"},
            )
        prom.record_session_launch()
        self._started_at = time.monotonic()
        reply = self._call(
            {
                "op": "load",
                "path": f"{CODE_DIR}/{CODE_NAME}",
                "allow": self.policy.imports.allow,
                "kwargs": self.env_kwargs,
                "class_name": self.class_name,
            },
            limit="start_timeout_s",
        )
        try:
            self.info = session_info(reply)
        except BadReply as exc:  # a rewritten server's answer: the channel cannot be trusted
            self._die(Failure(FailureKind.PROTOCOL, str(exc)))
        self.stats.start_s = time.perf_counter() - t0
        prom.record_session_loaded(self.stats.start_s)
        return self.info

    def close(self) -> None:
        """Ask the environment to close, then make sure the jail is gone and files removed."""
        if self._proc is not None and self.alive:
            # A failing close() is the design's problem, not ours.
            with contextlib.suppress(EnvFailure):
                self._call({"op": "close"}, limit="close_timeout_s")
        try:
            self._kill(grace=1.0)
        finally:  # whatever ending the jail raised, its session folder goes
            if self._files is not None:
                shutil.rmtree(self._files.root, ignore_errors=True)
                self._files = None

    # -- environment API ---------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        *,
        hint: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        result = self._call({"op": "reset", "seed": seed, "options": options, "hint": hint})
        return check_reset(result)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return check_step(self._call({"op": "step", "action": action}), self.reward_range)

    def solution(self) -> list[str]:
        from spade.envs.actions import split_solution

        raw = self._call({"op": "solution"})
        try:
            return split_solution(raw)
        except TypeError as exc:  # wrong return type from the design
            raise contract(f"solution(): {exc}") from None

    def tools(self) -> list[dict[str, Any]]:
        """The tool schemas, checked on every call (:mod:`spade.sandbox.schemas`)."""
        result = self._call({"op": "tools"})
        if problem := check_tools(result):
            raise contract(problem)
        return result

    # -- channel -----------------------------------------------------------------------------

    def _call(self, request: dict[str, Any], *, limit: str = "call_timeout_s") -> Any:
        """Send ``request`` and return its reply's result, within the policy's limit named
        ``limit`` (``start_timeout_s`` for the load, ``close_timeout_s`` for the close)."""
        if self.failure is not None:
            raise EnvFailure(self.failure, fatal=True)
        if self._proc is None:
            raise EnvFailure(Failure(FailureKind.PROTOCOL, "session not started"), fatal=True)
        t0 = self._call_t0 = time.perf_counter()
        self._next_id += 1
        request = {"id": self._next_id, **request}
        try:
            self._write(json.dumps(request).encode() + b"\n")
            line = self._read_line(limit)
        except _Dead as dead:
            self.failure = dead.failure
            prom.record_failure(dead.failure.kind)
            raise EnvFailure(dead.failure, fatal=True) from None
        except SandboxError:  # nsjail could not set the jail up: the host's failure
            prom.record_failure(prom.SANDBOX_ERROR)
            raise
        finally:
            self._call_t0 = None
            self.stats.calls += 1
            self.stats.call_s.append(time.perf_counter() - t0)
            self.stats.call_total_s += self.stats.call_s[-1]
            prom.record_call(request["op"], self.stats.call_s[-1])
        return self._parse_reply(line, load=limit == "start_timeout_s", rid=self._next_id)

    def _parse_reply(self, line: bytes, *, load: bool, rid: int) -> Any:
        try:
            reply = envelope(line, rid)
        except BadReply as exc:  # forged or corrupted channel: the session cannot be trusted
            self._die(Failure(FailureKind.PROTOCOL, str(exc)))
        if reply.get("denied"):
            names = ", ".join(sorted(set(reply["denied"])))
            self._die(
                Failure(FailureKind.IMPORT_DENIED, f"imports outside the allow-list: {names}")
            )
        if reply["ok"]:
            return reply.get("result")
        failure = failure_from_error(
            reply["error"], load=load, encode=reply.get("encode_error") is True
        )
        if failure.kind is FailureKind.DISK_LIMIT and self._log_full():
            failure = Failure(
                FailureKind.OUTPUT_LIMIT, "printed more than the log limit", failure.traceback
            )
        if load:
            self._die(failure)
        prom.record_failure(failure.kind)
        raise EnvFailure(failure, fatal=False)

    def _die(self, failure: Failure) -> NoReturn:
        self.failure = failure
        prom.record_failure(failure.kind)
        self._kill()
        raise EnvFailure(failure, fatal=True)

    def _write(self, data: bytes) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):  # the jail died before reading: classify its exit
            raise _Dead(self._exit_failure()) from None

    def _read_line(self, limit_name: str) -> bytes:
        """The next reply line, within the policy's limit ``limit_name`` (seconds)."""
        assert self._proc is not None and self._proc.stdout is not None
        limit_s = getattr(self.policy.limits, limit_name)
        deadline = time.monotonic() + limit_s
        fd = self._proc.stdout.fileno()
        limit = self.policy.limits.max_message_bytes
        searched = 0  # bytes already searched for the newline: each byte is searched once
        while (nl := self._buf.find(b"\n", searched)) < 0:
            searched = len(self._buf)
            if len(self._buf) > limit:
                self._kill()
                raise _Dead(Failure(FailureKind.OUTPUT_LIMIT, f"reply larger than {limit} bytes"))
            remaining = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(0.0, remaining))[0] if remaining > 0 else []
            if not ready:
                self._kill()
                raise _Dead(self._timeout_failure(limit_name, limit_s))
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise _Dead(self._exit_failure())
            self._buf += chunk
        if nl > limit:
            self._kill()
            raise _Dead(Failure(FailureKind.OUTPUT_LIMIT, f"reply larger than {limit} bytes"))
        line = bytes(self._buf[:nl])
        del self._buf[: nl + 1]
        return line

    # -- death and classification ------------------------------------------------------------

    def _timeout_failure(self, limit_name: str, limit_s: float) -> Failure:
        # the limit that ran out, by name: a load past start_timeout_s on a loaded host reads
        # differently from a call past call_timeout_s or a close past close_timeout_s
        what = {"start_timeout_s": "load", "close_timeout_s": "close"}.get(limit_name, "call")
        return Failure(
            FailureKind.TIMEOUT,
            f"no reply within the {what}'s wall-clock limit ({limit_name}: {limit_s:g}s)",
            self.log_tail(),
        )

    def _exit_failure(self) -> Failure:
        assert self._proc is not None
        try:
            rc = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # channel closed but nsjail lingers: end it
            self._kill()
            rc = self._proc.returncode
        log = self.jail_log()
        # nsjail itself could not set the jail up: our set-up, not the design. The child logs
        # an [F] line as it gives up, but nsjail may kill it first; its own line then says so.
        if _NOT_LAUNCHED in log or any(ln.startswith("[F]") for ln in log.splitlines()):
            errors = [ln for ln in log.splitlines() if ln.startswith(("[E]", "[F]"))]
            raise SandboxError("nsjail could not start the session:\n" + "\n".join(errors[-5:]))
        log_bytes = self._files.stderr.stat().st_size if self._files else 0
        failure = classify_exit(
            rc,
            elapsed_s=time.monotonic() - self._started_at,
            session_limit_s=self.policy.limits.session_seconds,
            log_text=log,
            log_bytes=log_bytes,
            log_limit_bytes=self.policy.limits.max_file_mb << 20,
            env_busy_s=self._env_busy_s(),
        )
        return Failure(failure.kind, failure.reason, self.log_tail())

    def _env_busy_s(self) -> float:
        """The time the environment itself took: its load and calls, the one in flight too."""
        in_flight = 0.0 if self._call_t0 is None else time.perf_counter() - self._call_t0
        return self.stats.call_total_s + in_flight

    def _kill(self, grace: float = 0.0) -> None:
        """End the jail: wait ``grace`` seconds for it to exit, then SIGTERM nsjail (it kills
        and reaps the child and removes its cgroup), and SIGKILL only if that does not work."""
        if self._proc is None:
            return
        for sig, wait in ((None, grace), (signal.SIGTERM, 2.0), (signal.SIGKILL, None)):
            if sig is not None and self._proc.poll() is None:
                # ProcessLookupError: it exited between poll() and the kill.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._proc.pid, sig)
            try:
                self._proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:  # still there: escalate
                continue
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                # BrokenPipeError: a request the dead jail never read is still buffered; the
                # pipe is closed all the same.
                with contextlib.suppress(BrokenPipeError):
                    stream.close()

    def _log_full(self) -> bool:
        limit = self.policy.limits.max_file_mb << 20
        return self._files is not None and self._files.stderr.stat().st_size >= limit

    def log_tail(self, limit: int = 4000) -> str | None:
        """The last ``limit`` bytes the environment wrote to stderr (tracebacks, prints)."""
        if self._files is None or not self._files.stderr.exists():
            return None
        with open(self._files.stderr, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - limit))
            text = fh.read().decode("utf-8", "replace")
        # The dynamic loader's warnings about nsjail's own libnl are not the design's output.
        lines = [ln for ln in text.splitlines() if "no version information available" not in ln]
        return "\n".join(lines).strip() or None

    def jail_log(self) -> str:
        """nsjail's own log for this session (mounts, limits, how the child ended)."""
        if self._files is None or not self._files.jail_log.exists():
            return ""
        return self._files.jail_log.read_text(errors="replace")[-20000:]
