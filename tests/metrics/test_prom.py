"""Sandbox metrics: real jailed sessions move the counters and histograms a real scrape sees;
the endpoint is one per process; multi-process mode sums every process's samples."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from spade.envs.examples import example_paths
from spade.metrics import prom
from spade.processes import free_port
from spade.records import FailureKind
from spade.sandbox import EnvFailure, JailedSession, load_policy
from tests.metrics.readers import scrape, value

REPO = Path(__file__).resolve().parents[2]
CODE_BREAKER = next(p for p in example_paths() if p.stem == "code_breaker").read_text()
SLEEPER = (REPO / "tests/sandbox/attacks/sleep_forever.py").read_text()
CRASHER = """
class CrashEnv:
    def reset(self, seed=None):
        return "start", {}
    def step(self, action):
        raise ValueError("bad move")
"""
CALL_TIMEOUT_S = 1.0


def _short_deadline():
    policy = load_policy()
    limits = policy.limits.model_copy(update={"call_timeout_s": CALL_TIMEOUT_S})
    return policy.model_copy(update={"limits": limits})


@pytest.mark.sandbox
def test_jailed_sessions_move_the_counters_a_scrape_sees(metrics_port, policy):
    """Counters and histograms move by what the sessions did; the step histogram holds exactly
    the durations the sessions measured (each step's, read from its session's stats), bucket by
    bucket, whatever the machine's speed: no bound on how long an answered step takes."""
    before = scrape(metrics_port)
    steps: list[float] = []  # each step's duration as its session measured it
    with JailedSession(CODE_BREAKER, env_kwargs={"max_turns": 25}, policy=policy) as s:  # load
        s.reset(7)
        s.step(s.solution()[0])
        steps.append(s.stats.call_s[-1])
    with JailedSession(CRASHER, policy=policy) as s:
        s.reset(0)
        with pytest.raises(EnvFailure) as crash:
            s.step("anything")
        assert crash.value.failure.kind is FailureKind.CRASH
        steps.append(s.stats.call_s[-1])
    with JailedSession(SLEEPER, policy=_short_deadline()) as s:
        s.reset(0)
        with pytest.raises(EnvFailure) as timeout:
            s.step("\\boxed{7}")
        assert timeout.value.failure.kind is FailureKind.TIMEOUT
        steps.append(s.stats.call_s[-1])
    with pytest.raises(EnvFailure) as syntax, JailedSession("class Broken(:\n", policy=policy):
        pass  # entering starts it (and cleans up when the code does not load)
    assert syntax.value.failure.kind is FailureKind.SYNTAX
    after = scrape(metrics_port)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("spade_sandbox_session_starts_total") == 4
    assert delta("spade_sandbox_session_start_seconds_count") == 3  # the syntax error never loaded
    assert delta("spade_sandbox_session_start_seconds_sum") > 0
    assert delta("spade_sandbox_calls_total", op="load") == 4
    assert delta("spade_sandbox_calls_total", op="reset") == 3
    assert delta("spade_sandbox_calls_total", op="solution") == 1
    assert delta("spade_sandbox_calls_total", op="step") == 3  # answered, raised, timed out
    assert delta("spade_sandbox_call_seconds_count", op="step") == 3
    assert delta("spade_sandbox_call_seconds_bucket", op="step", le="+Inf") == 3
    # the timed-out step waited for its whole deadline (a lower bound: a busy machine only
    # makes it longer), and the histogram holds the three durations measured, bucket by bucket
    assert steps[-1] >= CALL_TIMEOUT_S
    assert delta("spade_sandbox_call_seconds_sum", op="step") == pytest.approx(sum(steps))
    for le in prom.CALL_BUCKETS:
        in_bucket = sum(d <= le for d in steps)
        assert delta("spade_sandbox_call_seconds_bucket", op="step", le=str(le)) == in_bucket, le
    assert delta("spade_sandbox_failures_total", kind="crash") == 1
    assert delta("spade_sandbox_failures_total", kind="timeout") == 1
    assert delta("spade_sandbox_failures_total", kind="syntax") == 1
    # closing a session whose jail timed out (and was killed) is no new failure
    assert sum(delta("spade_sandbox_failures_total", kind=str(k)) for k in FailureKind) == 3


def test_the_endpoint_is_one_per_process(metrics_port, caplog):
    assert prom.start_metrics_server(metrics_port) is True  # again: nothing new
    other = free_port()
    assert prom.start_metrics_server(other) is True
    assert "already served on port" in caplog.text
    assert prom.served_port() == metrics_port
    assert prom.start_metrics_server(None) is False  # metrics.prometheus_port unset: off
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{other}/metrics", timeout=2)


def _env(**more: str) -> dict[str, str]:
    """This process's environment without multi-process mode (prometheus_client switches it
    on when the variable is merely present, even empty), plus ``more``."""
    base = {k: v for k, v in os.environ.items() if k.upper() != "PROMETHEUS_MULTIPROC_DIR"}
    return base | more


def _python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(**(env or {})),
        timeout=120,
        check=True,
    )


def test_a_taken_port_is_a_warning_not_an_error():
    """A second flow-run process on the same worker and port (single-process mode)."""
    port = free_port()
    out = _python(
        "import socket, logging; logging.basicConfig();"
        f"s = socket.socket(); s.bind(('0.0.0.0', {port})); s.listen();"
        "from spade.metrics import prom;"
        f"print(prom.start_metrics_server({port}), prom.served_port())",
    )
    assert out.stdout.split() == ["False", "None"]
    assert f"port {port} is taken" in out.stderr and "PROMETHEUS_MULTIPROC_DIR" in out.stderr


def _wait_for(port: int, proc: subprocess.Popen[str]) -> dict:
    deadline = time.monotonic() + 60
    while True:
        try:
            return scrape(port)
        except OSError:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the exporter never answered"
            time.sleep(0.2)


def test_multiprocess_exporter_sums_every_process(tmp_path):
    """What infra/README.md describes for Prefect process workers: every flow-run process
    writes to $PROMETHEUS_MULTIPROC_DIR, one exporter serves the sum, even of ended ones."""
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    record = (
        "from spade.metrics import prom;"
        "prom.record_session_launch(); prom.record_session_loaded(0.05);"
        "prom.record_call('step', 0.002); prom.record_failure('timeout')"
    )
    for _ in range(2):  # two flow runs, both over before anyone scrapes
        _python(record, env)
    port = free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "spade.metrics.prom", "--port", str(port), "--addr", "127.0.0.1"],
        cwd=REPO,
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        samples = _wait_for(port, exporter)
        assert value(samples, "spade_sandbox_session_starts_total") == 2
        assert value(samples, "spade_sandbox_session_start_seconds_count") == 2
        assert value(samples, "spade_sandbox_calls_total", op="step") == 2
        assert value(samples, "spade_sandbox_call_seconds_bucket", op="step", le="0.0025") == 2
        assert value(samples, "spade_sandbox_failures_total", kind="timeout") == 2
        # a flow run told to serve the same port finds it taken: its samples are served anyway
        out = _python(
            "import logging; logging.basicConfig(level=logging.INFO);"
            f"from spade.metrics import prom; print(prom.start_metrics_server({port}));"
            "prom.record_failure('timeout')",
            env,
        )
        assert out.stdout.split() == ["False"] and "sums this process" in out.stderr
        assert value(scrape(port), "spade_sandbox_failures_total", kind="timeout") == 3
    finally:
        exporter.terminate()
        exporter.wait(timeout=10)


def test_the_exporter_needs_the_multiprocess_folder(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "spade.metrics.prom", "--port", str(free_port())],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "PROMETHEUS_MULTIPROC_DIR" in out.stderr


def test_recording_does_not_import_prometheus_client_until_used():
    out = _python(
        "import sys, spade.sandbox;"
        "print('prometheus_client' in sys.modules);"
        "from spade.metrics import prom; prom.record_call('step', 0.001);"
        "print('prometheus_client' in sys.modules)"
    )
    assert out.stdout.split() == ["False", "True"]


def test_recording_never_raises_into_a_session(tmp_path):
    """A multi-process folder that does not exist: every sample fails to write; the sandbox
    must not notice (one warning, then silence)."""
    out = _python(
        "import logging; logging.basicConfig();"
        "from spade.metrics import prom;"
        "prom.record_session_launch(); prom.record_call('step', 0.001);"
        "prom.record_failure('crash'); prom.record_session_loaded(0.1); print('ok')",
        {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "missing")},
    )
    assert out.stdout.split() == ["ok"]
    assert out.stderr.count("sandbox metrics are not being recorded") == 1
