"""Sandbox benchmark: what the nsjail session costs, measured side by side in one run.

Three questions, each answered against a plain baseline on the same machine in the same run:

1. **Session start latency.** ``JailedSession(code).start()`` + ``close()`` on one bundled
   example, against a plain ``subprocess.run`` of the host interpreter and of the
   interpreter the jail runs (``/usr/bin/python3.11 -I -S``). The ratio says how much the
   jail (namespaces, mounts, cgroup, loading the design) adds to starting a Python at all;
   it is paid once per session, so it bounds how many short sessions a round can afford.
2. **Per-step overhead.** The same example, reset with the same seed and driven through the
   same action sequence, stepped (a) in-process, (b) through a persistent jailed session. A
   bare JSON-lines echo server over pipes (no jail, no environment) gives the transport
   floor. docs/architecture.md §7.4: a pipe round trip costs ~55 µs here and nsjail adds almost
   nothing per step; the aim is a jailed overhead under 100 µs per step. (The jail runs
   Debian's Python 3.11, the host 3.12, so the environment's own work differs slightly.)
3. **Verifications per second** with 1, 2 and 4 ``verify()`` calls in parallel (threads; each
   verification drives its own jailed sessions), over the bundled examples. On a 2-core
   machine the speed-up is expected to flatten past 2 workers.

Benchmarks report; they do not assert. Results print as tables and are written as JSON
(default ``bench/results/sandbox.json``) with machine info and a timestamp.

Usage: ``.venv/bin/python bench/sandbox.py [--quick] [--out PATH] [--env STEM]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

from spade.envs.actions import split_solution
from spade.envs.examples import example_paths
from spade.sandbox.policy import SandboxPolicy, load_policy
from spade.sandbox.session import JailedSession
from spade.verify.verifier import verify

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "sandbox.json"
PIPE_FLOOR_US = 55.0  # the design's JSON-lines pipe round trip, median (architecture.md §7.4)
STEP_TARGET_US = 100.0  # aim for the jailed per-step overhead
SEED = 1234

# A JSON-lines echo server: what the jailed channel costs without the jail or an environment.
ECHO_SERVER = (
    "import json,sys\n"
    "for line in sys.stdin:\n"
    "    sys.stdout.write(json.dumps({'ok': True, 'result': json.loads(line)}) + '\\n')\n"
    "    sys.stdout.flush()\n"
)


@dataclass(frozen=True)
class Sizes:
    starts: int
    steps: int
    verify_rounds: int  # passes over all examples per worker count


QUICK = Sizes(starts=8, steps=500, verify_rounds=1)
FULL = Sizes(starts=50, steps=10000, verify_rounds=6)


@cache
def policy() -> SandboxPolicy:
    """The policy in force, loaded once for the whole benchmark."""
    return load_policy()


# -- statistics ----------------------------------------------------------------------------


def summarize(samples: list[float], scale: float) -> dict[str, float]:
    """Median and p90 of ``samples`` (seconds) in the unit given by ``scale`` (1e3 = ms)."""
    p90 = statistics.quantiles(samples, n=10)[8] if len(samples) > 1 else samples[0]
    return {
        "median": statistics.median(samples) * scale,
        "p90": p90 * scale,
        "n": len(samples),
    }


def timed(fn: Callable[[], object], n: int) -> list[float]:
    """Wall time of ``n`` calls of ``fn`` after one untimed warm-up call."""
    fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


# -- 1. session start latency --------------------------------------------------------------


def jailed_start_close(code: str) -> None:
    session = JailedSession(code, policy=policy())
    try:
        session.start()
    finally:
        session.close()


def bench_start(code: str, n: int) -> dict[str, Any]:
    jail_python = str(policy().interpreter)
    jailed = summarize(timed(lambda: jailed_start_close(code), n), 1e3)
    host = summarize(
        timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), n), 1e3
    )
    bare = summarize(
        timed(lambda: subprocess.run([jail_python, "-I", "-S", "-c", "pass"], check=True), n), 1e3
    )
    return {
        "unit": "ms",
        "jailed_start_close": jailed,
        "plain_host_python": host | {"argv": [sys.executable, "-c", "pass"]},
        "plain_jail_python": bare | {"argv": [jail_python, "-I", "-S", "-c", "pass"]},
        "ratio_vs_host_python": jailed["median"] / host["median"],
        "ratio_vs_jail_python": jailed["median"] / bare["median"],
    }


# -- 2. per-step overhead ------------------------------------------------------------------


def load_in_process(path: Path) -> type:
    """The example's environment class, imported into this process.

    Bundled examples are OUR trusted code, shipped with the package; this is the only reason
    importing them here is acceptable. Generated designs must never be loaded this way: they
    run only inside the jail.
    """
    spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    classes = [
        obj
        for name, obj in vars(module).items()
        if isinstance(obj, type) and name.endswith("Env") and obj.__module__ == module.__name__
    ]
    return classes[-1]  # the last defined, as the jail's server picks it


def step_samples(
    reset: Callable[[], object], step: Callable[[str], tuple], actions: list[str], n: int
) -> list[float]:
    """Time ``n`` steps cycling through ``actions``; episodes that end are reset (untimed)."""
    samples: list[float] = []
    reset()
    i = 0
    while len(samples) < n:
        t0 = time.perf_counter()
        result = step(actions[i % len(actions)])
        samples.append(time.perf_counter() - t0)
        i += 1
        if result[2] or result[3] or i % len(actions) == 0:  # terminated, truncated or replayed
            reset()
            i = 0
    return samples


class EchoClient:
    """A plain subprocess answering JSON lines over pipes, read the way the session reads."""

    def __init__(self, python: str) -> None:
        self.proc = subprocess.Popen(
            [python, "-I", "-S", "-c", ECHO_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.buf = bytearray()

    def call(self, request: dict[str, Any]) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()
        while (nl := self.buf.find(b"\n")) < 0:
            select.select([fd], [], [], 5.0)
            self.buf += os.read(fd, 1 << 16)
        line = bytes(self.buf[:nl])
        del self.buf[: nl + 1]
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def pipe_samples(n: int) -> list[float]:
    client = EchoClient(str(policy().interpreter))
    try:
        return timed(lambda: client.call({"op": "step", "action": "\\boxed{N}"}), n)
    finally:
        client.close()


def bench_step(path: Path, n: int) -> dict[str, Any]:
    code = path.read_text(encoding="utf-8")
    with JailedSession(code, policy=policy()) as session:
        session.reset(SEED)
        actions = split_solution(session.solution())
        jailed = step_samples(lambda: session.reset(SEED), session.step, actions, n)
    env = load_in_process(path)()
    in_process = step_samples(lambda: env.reset(seed=SEED), env.step, actions, n)
    pipe = summarize(pipe_samples(n), 1e6)
    jailed_s, in_proc_s = summarize(jailed, 1e6), summarize(in_process, 1e6)
    return {
        "unit": "us",
        "env": path.stem,
        "actions": len(actions),
        "in_process": in_proc_s,
        "plain_pipe_echo": pipe,
        "jailed": jailed_s,
        "overhead_median": jailed_s["median"] - in_proc_s["median"],
        "jailed_minus_pipe_median": jailed_s["median"] - pipe["median"],
        "design_pipe_floor": PIPE_FLOOR_US,
        "target_overhead": STEP_TARGET_US,
    }


# -- 3. verifications per second -----------------------------------------------------------


def verify_throughput(codes: list[str], workers: int, rounds: int) -> dict[str, Any]:
    jobs = codes * rounds
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        verdicts = list(pool.map(lambda code: verify(code, policy=policy()), jobs))
    seconds = time.perf_counter() - t0
    return {
        "workers": workers,
        "verifications": len(jobs),
        "accepted": sum(v.accepted for v in verdicts),
        "seconds": seconds,
        "per_second": len(jobs) / seconds,
    }


def bench_verify(rounds: int, worker_counts: tuple[int, ...] = (1, 2, 4)) -> dict[str, Any]:
    codes = [p.read_text(encoding="utf-8") for p in example_paths()]
    verify(codes[0], policy=policy())  # warm-up: imports, policy, page cache
    runs = [verify_throughput(codes, w, rounds) for w in worker_counts]
    for run in runs:
        run["speedup"] = run["per_second"] / runs[0]["per_second"]
    return {"examples": len(codes), "rounds": rounds, "runs": runs}


# -- report --------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    jail_python = str(policy().interpreter)
    jail_version = subprocess.run(
        [jail_python, "-I", "-S", "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return machine() | {"jail_python": f"{jail_python} {jail_version}", "timestamp": timestamp()}


def start_table(r: dict[str, Any]) -> Table:
    t = Table(title="1. Session start latency (ms)")
    for col in ("what", "median", "p90", "n", "jailed / this"):
        t.add_column(col, justify="left" if col == "what" else "right")
    t.add_row("jailed start()+close()", *_stat(r["jailed_start_close"], ".1f"), "1.0x")
    t.add_row(
        "plain host python -c pass",
        *_stat(r["plain_host_python"], ".1f"),
        f"{r['ratio_vs_host_python']:.1f}x",
    )
    t.add_row(
        "plain python3.11 -I -S -c pass",
        *_stat(r["plain_jail_python"], ".1f"),
        f"{r['ratio_vs_jail_python']:.1f}x",
    )
    return t


def step_table(r: dict[str, Any]) -> Table:
    t = Table(title=f"2. Per-step cost, {r['env']} (µs per step)")
    for col in ("what", "median", "p90", "n"):
        t.add_column(col, justify="left" if col == "what" else "right")
    t.add_row("in-process env.step", *_stat(r["in_process"], ".1f"))
    t.add_row("plain pipe JSON echo (no jail)", *_stat(r["plain_pipe_echo"], ".1f"))
    t.add_row("jailed session.step", *_stat(r["jailed"], ".1f"))
    t.add_row("overhead (jailed − in-process)", f"{r['overhead_median']:.1f}", "", "")
    t.add_row("jailed − plain pipe", f"{r['jailed_minus_pipe_median']:.1f}", "", "")
    t.caption = (
        f"docs/architecture.md §7.4: a pipe round trip (the design's ~{PIPE_FLOOR_US:.0f} µs;"
        " this run's echo above) is the floor; "
        f"aim: overhead under {STEP_TARGET_US:.0f} µs"
    )
    return t


def verify_table(r: dict[str, Any]) -> Table:
    t = Table(
        title=f"3. Verifications per second ({r['examples']} examples x {r['rounds']} rounds)"
    )
    for col in ("workers", "verifications", "accepted", "seconds", "verif/s", "speed-up"):
        t.add_column(col, justify="right")
    for run in r["runs"]:
        t.add_row(
            str(run["workers"]),
            str(run["verifications"]),
            str(run["accepted"]),
            f"{run['seconds']:.1f}",
            f"{run['per_second']:.2f}",
            f"{run['speedup']:.2f}x",
        )
    return t


def _stat(s: dict[str, float], fmt: str) -> tuple[str, str, str]:
    return format(s["median"], fmt), format(s["p90"], fmt), str(s["n"])


def report(results: dict[str, Any], console: Console) -> None:
    m = results["machine"]
    console.print(
        f"[bold]spade sandbox benchmark[/bold]  {m['timestamp']}  nproc={m['nproc']}  "
        f"python {m['python']}  jail {m['jail_python']}  kernel {m['kernel']}  "
        f"mode={results['mode']}"
    )
    console.print(start_table(results["start_latency"]))
    console.print(step_table(results["step_overhead"]))
    console.print(verify_table(results["verify_throughput"]))


# -- main ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small counts (~20 s), for smoke tests"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the JSON")
    parser.add_argument("--env", default="maze_walk", help="example (file stem) for sections 1-2")
    return parser.parse_args(argv)


def example(stem: str) -> Path:
    by_stem = {p.stem: p for p in example_paths()}
    if stem not in by_stem:
        raise SystemExit(f"no example {stem!r}; have: {', '.join(sorted(by_stem))}")
    return by_stem[stem]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    path = example(args.env)
    console = Console()
    t0 = time.perf_counter()
    results = {
        "mode": "quick" if args.quick else "full",
        "machine": machine_info(),
        "start_latency": bench_start(path.read_text(encoding="utf-8"), sizes.starts)
        | {"env": path.stem},
        "step_overhead": bench_step(path, sizes.steps),
        "verify_throughput": bench_verify(sizes.verify_rounds),
    }
    results["wall_seconds"] = time.perf_counter() - t0
    report(results, console)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, results)
    console.print(f"wrote {args.out} in {results['wall_seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
