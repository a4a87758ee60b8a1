"""Prometheus metrics of the sandbox: jailed session starts, calls, failures by kind, latencies.

:class:`~spade.sandbox.session.JailedSession` reports through the ``record_*`` functions below;
:func:`start_metrics_server` serves them on ``/metrics`` when ``metrics.prometheus_port`` is set.

Exposed series (``op`` is the session request: load, reset, step, solution, tools, close;
``kind`` a :class:`~spade.records.FailureKind` value, or ``sandbox_error`` when
nsjail itself could not set a jail up):

- ``spade_sandbox_session_starts_total`` — jails launched;
- ``spade_sandbox_session_start_seconds`` — histogram: launch to code loaded (successful starts);
- ``spade_sandbox_calls_total{op}`` and ``spade_sandbox_call_seconds{op}`` — every request on a
  session's channel, answered or not;
- ``spade_sandbox_failures_total{kind}`` — every classified failure, counted once where the
  session classifies it.

**One process, one endpoint.** Metrics live in the process that runs the sessions. Each worker
process serves its own port (:func:`start_metrics_server` is idempotent per process); a second
process on the same host cannot bind the same port and only logs a warning. Prefect process
workers start every flow run as a subprocess, and Dask runs tasks in its own worker processes:
set ``PROMETHEUS_MULTIPROC_DIR`` (an empty folder per host, set before the processes start) and
every process writes its samples there, and whichever process serves the port — or the
standalone exporter ``python -m spade.metrics.prom --port N`` — serves the sum of all of them.
infra/README.md ("Metrics") describes both set-ups.

prometheus_client is imported on first use, not at import, so importing the sandbox stays cheap
(~0.1 s saved); if it is missing, recording is a no-op (it is a Prefect dependency, so in
practice it is always there).
"""

from __future__ import annotations

import argparse
import errno
import functools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
NAMESPACE = "spade_sandbox"

# A call is a JSON round trip (~55 µs here) plus the design's own work, up to the call deadline
# (seconds); a start is the jail (~40 ms) plus loading the code, up to the start deadline.
CALL_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
START_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

SANDBOX_ERROR = "sandbox_error"
"""Failure label for nsjail refusing to set a jail up: the host's problem, not the design's."""


@dataclass(frozen=True)
class _Metrics:
    starts: Any
    start_seconds: Any
    calls: Any
    call_seconds: Any
    failures: Any


_lock = threading.Lock()
_metrics: _Metrics | None = None
_unavailable = False
_served: tuple[int, Any] | None = None  # (port, server) of this process's endpoint
_record_failed = False  # warned once that recording fails
_call_children: dict[str, tuple[Any, Any]] = {}  # op -> its (calls, call_seconds) series


def _get() -> _Metrics | None:
    """The metric objects, created once per process (under a lock: the default registry
    refuses a second registration of the same name, and sessions start on many threads)."""
    global _metrics, _unavailable
    if _metrics is not None or _unavailable:
        return _metrics
    with _lock:
        if _metrics is None and not _unavailable:
            try:
                from prometheus_client import Counter, Histogram
            except ImportError:  # recording becomes a no-op; say so once
                _unavailable = True
                log.warning("prometheus_client is not installed: sandbox metrics are off")
                return None
            _metrics = _Metrics(
                starts=Counter("session_starts", "Jailed sessions launched.", namespace=NAMESPACE),
                start_seconds=Histogram(
                    "session_start_seconds",
                    "Seconds from launching a jail to the design's code loaded.",
                    namespace=NAMESPACE,
                    buckets=START_BUCKETS,
                ),
                calls=Counter("calls", "Requests on jailed sessions.", ["op"], namespace=NAMESPACE),
                call_seconds=Histogram(
                    "call_seconds",
                    "Seconds per request on a jailed session, answered or not.",
                    ["op"],
                    namespace=NAMESPACE,
                    buckets=CALL_BUCKETS,
                ),
                failures=Counter(
                    "failures",
                    "Classified failures of jailed sessions, by kind.",
                    ["kind"],
                    namespace=NAMESPACE,
                ),
            )
    return _metrics


# -- recording (called by the sandbox session; never raises into it) -------------------------


def _never_raises[**P](record: Callable[P, None]) -> Callable[P, None]:
    """Metrics must not break a session: e.g. a multi-process folder that does not exist makes
    every sample fail to write. Warn once per process, then keep quiet."""

    @functools.wraps(record)
    def safe(*args: P.args, **kwargs: P.kwargs) -> None:
        global _record_failed
        try:
            record(*args, **kwargs)
        except Exception as exc:
            if not _record_failed:
                _record_failed = True
                log.warning("sandbox metrics are not being recorded: %r", exc)

    return safe


@_never_raises
def record_session_launch() -> None:
    """A jail was launched."""
    if (m := _get()) is not None:
        m.starts.inc()


@_never_raises
def record_session_loaded(seconds: float) -> None:
    """A session's code loaded ``seconds`` after its jail was launched."""
    if (m := _get()) is not None:
        m.start_seconds.observe(seconds)


@_never_raises
def record_call(op: str, seconds: float) -> None:
    """One request of kind ``op`` took ``seconds`` (answered, failed or timed out)."""
    if (m := _get()) is not None:
        if (children := _call_children.get(op)) is None:  # labels() costs ~2 µs a call
            children = _call_children.setdefault(
                op, (m.calls.labels(op), m.call_seconds.labels(op))
            )
        children[0].inc()
        children[1].observe(seconds)


@_never_raises
def record_failure(kind: str) -> None:
    """A session classified a failure of ``kind`` (a FailureKind value or SANDBOX_ERROR)."""
    if (m := _get()) is not None:
        m.failures.labels(str(kind)).inc()


# -- serving ---------------------------------------------------------------------------------


def multiprocess_dir() -> str | None:
    """The shared samples folder when prometheus_client runs in multi-process mode."""
    return os.environ.get(MULTIPROC_ENV) or os.environ.get(MULTIPROC_ENV.lower())


def _registry() -> Any:
    """What the endpoint serves: this process's registry, or in multi-process mode a registry
    that sums every process's samples from the shared folder."""
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    if multiprocess_dir() is None:
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    return registry


def served_port() -> int | None:
    """The port this process serves metrics on, if any."""
    return _served[0] if _served else None


def start_metrics_server(port: int | None, addr: str = "0.0.0.0") -> bool:
    """Serve the sandbox metrics on ``http://addr:port/metrics``; ``port`` None: off.

    Idempotent per process: a second call returns at once (a different port is refused with a
    warning; one process has one endpoint). Returns whether this process serves them. A port
    another process already holds is a warning, not an error: metrics are a side channel.
    """
    global _served
    if port is None:
        return False
    with _lock:
        if _served is not None:
            if _served[0] != port:
                log.warning(
                    "sandbox metrics are already served on port %d; not also on %d",
                    _served[0],
                    port,
                )
            return True
    if _get() is None:
        return False
    from prometheus_client import start_http_server

    with _lock:
        if _served is not None:  # another thread got here first
            return True
        try:
            server, _thread = start_http_server(port, addr=addr, registry=_registry())
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                log.warning("cannot serve sandbox metrics on %s:%d: %s", addr, port, exc)
            elif multiprocess_dir() is not None:
                # Another process on this host serves the shared folder, ours included.
                log.info("port %d is taken; its server sums this process's metrics too", port)
            else:
                log.warning(
                    "port %d is taken (another flow run on this worker?): this process's "
                    "sandbox metrics are not served; give each process its own port or set %s",
                    port,
                    MULTIPROC_ENV,
                )
            return False
        _served = (port, server)
    log.info("sandbox metrics on http://%s:%d/metrics", addr, port)
    return True


def main(argv: list[str] | None = None) -> None:
    """The standalone exporter for multi-process mode: serve the sum of every process's samples
    in ``$PROMETHEUS_MULTIPROC_DIR`` until killed (run it beside a Prefect worker)."""
    parser = argparse.ArgumentParser(prog="python -m spade.metrics.prom", description=main.__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--addr", default="0.0.0.0")
    args = parser.parse_args(argv)
    folder = multiprocess_dir()
    if folder is None or not os.path.isdir(folder):
        parser.error(f"{MULTIPROC_ENV} must name an existing folder (the processes' samples)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not start_metrics_server(args.port, args.addr):
        raise SystemExit(f"could not serve on {args.addr}:{args.port}")
    threading.Event().wait()  # the server runs on a daemon thread


if __name__ == "__main__":
    main()
