"""Orchestration benchmark: how much of a round's wall time is not stage work, and what resuming
a round whose last stage failed costs against running it from scratch.

1. Overhead. One round (``flows.round.round_flow``) of a fresh campaign on a fresh object store.
   ``W`` is the wall time of the flow call (from before ``round_flow`` is called to after it
   returns); ``S`` the sum of the round's stage manifests' ``seconds`` (each stage's busy wall
   time; for the mapped stages the union of their tasks' intervals, for ``design`` the sum over
   its attempts). The overhead share is ``(W - S) / W`` (the issue's aim: under 5% for
   ``configs/demo-cpu.yaml``). ``W - S`` is split with the Prefect API's own run times:
   before and after the flow run is Running (creating it, reporting its end), the flow body
   between task runs (creating task runs, proposing their states, the flow's bookkeeping:
   ``ensure_campaign``, ``carried_state``, ``summarize_round``), and inside task runs but
   outside the stages' records (cache keys, opening the shared model backend, result
   persistence). Timed across all of these: Prefect walking every task argument
   (``visit_collection``, which looks for upstream futures in, and resolves, each parameter:
   its cost grows with the data passed between tasks, the trajectories above all). A
   calibration flow of no-op tasks gives Prefect's fixed cost per task on this machine.
2. Resume. A second fresh campaign whose held-out stage (the last) fails: its first call raises
   (``spade.pipeline.heldout.heldout``, which the flow's ``heldout`` task looks up at call
   time) and, for that run only, the task's retries are off (with its 2 retries and 10 s
   backoff the task would just succeed on retry). The round fails; then it runs again with
   the same campaign id and config, every earlier task coming back from Prefect's cache.
   ``T_resume`` is that second run's wall time, reported against ``W``.

Order: the failing run goes first and doubles as the process warm-up (imports, Prefect client,
first jail start), so ``W`` and ``T_resume`` are both warm runs; before each timed run the
shared model backends are closed, so both load the model as a fresh process would.

Modes: ``--scripted`` (default): the OpenAI-compatible stand-in answers as the scripted
designer/hinter/agent of the integration tests (it walks east in the held-out maze), a tiny
random-weight policy is trained, ``spade/envs/examples/maze_walk.py`` is the held-out set.
``--config PATH``: a real config (e.g. ``configs/demo-cpu.yaml``, in-process SmolLM2), one
round, the store in a temporary folder. ``--no-train`` turns ``run.train`` off. The Prefect API
is a temporary local one (``prefect_test_harness``) unless ``PREFECT_API_URL`` is set.

Benchmarks report; they do not assert. A table prints, JSON goes to
``bench/results/orchestration.json`` (with machine info and a timestamp).

Usage: ``.venv/bin/python bench/orchestration.py [--scripted | --config PATH] [--no-train]
[--out PATH]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
DEFAULT_OUT = BENCH / "results" / "orchestration.json"
HELDOUT_ENV = REPO / "spade" / "envs" / "examples" / "maze_walk.py"
AIM_SHARE = 0.05
SCRATCH_ID, RESUME_ID = "bench-scratch", "bench-resume"
BOOKKEEPING = ("ensure_campaign", "carried_state", "summarize_round", "result_storage")


class Clock:
    """Seconds spent in named calls (from any thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def add(self, name: str, seconds: float) -> None:
        with self.lock:
            self.seconds[name] += seconds
            self.calls[name] += 1

    def reset(self) -> None:
        with self.lock:
            self.seconds.clear()
            self.calls.clear()

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self.lock:
            return {
                n: {"seconds": round(s, 3), "calls": self.calls[n]} for n, s in self.seconds.items()
            }

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - t0)

        return wrapper

    def timed_outermost(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Like :meth:`timed` for a function that may call itself: nested calls in the same
        thread are not counted again."""
        local = threading.local()

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                local.depth = depth
                if depth == 0:
                    self.add(name, time.perf_counter() - t0)

        return wrapper

    def timed_backend(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``shared_backend`` with its opening and closing timed (the body is not)."""

        @contextlib.asynccontextmanager
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            async with contextlib.AsyncExitStack() as stack:
                backend = await stack.enter_async_context(fn(*args, **kwargs))
                self.add("backend_open", time.perf_counter() - t0)
                try:
                    yield backend
                finally:
                    t1 = time.perf_counter()
                    await stack.aclose()
                    self.add("backend_close", time.perf_counter() - t1)

        return wrapper


@contextlib.contextmanager
def instrumented(clock: Clock) -> Iterator[None]:
    """Time what runs outside every stage record: the flow's bookkeeping calls and the task
    bodies' backend handling in flows/, the tasks' cache keys, and Prefect walking task
    parameters (``visit_collection``: finding upstream futures in, and resolving, every
    argument of every task call); the stages themselves are untouched."""
    import prefect.flow_engine
    import prefect.futures
    import prefect.task_engine
    import prefect.utilities.engine
    from prefect.cache_policies import TaskSource
    from prefect.utilities.collections import visit_collection

    import flows.round as rf
    from flows import design_tasks, pool_tasks

    with contextlib.ExitStack() as stack:
        for name in BOOKKEEPING:
            stack.enter_context(mock.patch.object(rf, name, clock.timed(name, getattr(rf, name))))
        timed_backend = clock.timed_backend(rf.shared_backend)
        for module in (rf, design_tasks, pool_tasks):  # every module whose tasks use a backend
            stack.enter_context(mock.patch.object(module, "shared_backend", timed_backend))
        for name, policy in (("cache_key_stage", rf.StageKey), ("cache_key_source", TaskSource)):
            timed = clock.timed(name, policy.compute_key)
            stack.enter_context(mock.patch.object(policy, "compute_key", timed))
        walk = clock.timed_outermost("visit_collection", visit_collection)
        modules = (
            prefect.utilities.engine,
            prefect.task_engine,
            prefect.futures,
            prefect.flow_engine,
        )
        for module in modules:
            stack.enter_context(mock.patch.object(module, "visit_collection", walk))
        yield


@contextlib.contextmanager
def heldout_fails_once() -> Iterator[dict[str, int]]:
    """The held-out stage raises on its first call; the flow's task does not retry it."""
    import flows.round as rf
    from spade.pipeline import heldout as heldout_module

    real = heldout_module.heldout
    calls = {"n": 0}

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected fault in the heldout stage (bench/orchestration.py)")
        return await real(*args, **kwargs)

    with (
        mock.patch.object(heldout_module, "heldout", flaky),
        mock.patch.object(rf, "heldout", rf.heldout.with_options(retries=0)),
    ):
        yield calls


def scripted_model() -> Any:
    """The integration tests' scripted model; as the agent of an environment it does not know
    (the held-out maze) it always walks east."""
    from tests.integration.scripted_designer import ScriptedModel

    class HeldoutScriptedModel(ScriptedModel):
        def play(self, messages: list[dict[str, Any]]) -> str:
            try:
                return super().play(messages)
            except AttributeError:  # no "Puzzle #": not one of the scripted designs
                return "\\boxed{E}"

    return HeldoutScriptedModel()


def scripted_config(server: Any, tmp: Path, root: Path, train: bool) -> Any:
    from spade.config import load_config
    from tests.integration.scripted_designer import round_overrides, write_corpus, write_tiny_policy

    corpus = tmp / "corpus.jsonl"
    if not corpus.exists():
        write_corpus(corpus)
    policy = tmp / "policy"
    if not policy.exists():
        write_tiny_policy(policy)
    return load_config(
        overrides={
            **round_overrides(server, corpus),
            "name": "bench-orchestration",
            "storage.root": str(root),
            "model.name_or_path": str(policy),
            "model.max_context_tokens": 16384,
            "training.designer_delay_steps": 0,
            "run.heldout_envs": [str(HELDOUT_ENV)],
            "run.train": train,
            "run.rounds": 1,
        }
    )


def file_config(path: Path, root: Path, train: bool) -> Any:
    """``path`` with the store in ``root``; relative held-out paths resolved against the repo."""
    from spade.config import load_config

    heldout = [
        e if Path(e).expanduser().exists() or not (REPO / e).exists() else str(REPO / e)
        for e in load_config(path).run.heldout_envs
    ]
    overrides: dict[str, object] = {
        "storage.root": str(root),
        "run.rounds": 1,
        "run.heldout_envs": heldout,
    }
    if not train:
        overrides["run.train"] = False
    return load_config(path, overrides=overrides)


def run_round(cfg: Any, cid: str) -> tuple[Any, float]:
    """One ``round_flow`` call: its final state and wall time."""
    from flows.round import round_flow

    t0 = time.perf_counter()
    state = asyncio.run(round_flow(config=cfg, campaign_id=cid, round_index=0, return_state=True))
    return state, time.perf_counter() - t0


def close_backends() -> None:
    from spade.inference.pool import close_shared_backends

    asyncio.run(close_shared_backends())


def prefect_calibration(storage: Path, n: int = 20) -> dict[str, Any]:
    """What Prefect costs per task on this machine: a flow of ``n`` no-op tasks (results
    persisted with a cache key on their inputs, like the round's) against an empty flow."""
    from prefect import flow, task
    from prefect.cache_policies import INPUTS

    storage.mkdir(parents=True, exist_ok=True)

    @task(
        name="noop",
        persist_result=True,
        result_serializer="pickle",
        result_storage=storage,
        cache_policy=INPUTS,
    )
    def noop(i: int) -> int:
        return i

    @flow(name="bench-noop", persist_result=False)
    async def noop_flow(n: int) -> None:
        for i in range(n):
            noop(i)

    walls = {}
    for count in (0, n):
        t0 = time.perf_counter()
        asyncio.run(noop_flow(count))
        walls[count] = time.perf_counter() - t0
    return {
        "tasks": n,
        "empty_flow_wall_s": round(walls[0], 3),
        "flow_wall_s": round(walls[n], 3),
        "per_task_s": round((walls[n] - walls[0]) / n, 4),
    }


def busy(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


async def _read_runs(flow_run_id: Any) -> tuple[Any, list[Any]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        flow_run = await client.read_flow_run(flow_run_id)
        tasks = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])), limit=200
        )
    return flow_run, tasks


def prefect_times(flow_run_id: Any, timeout: float = 30.0) -> dict[str, Any]:
    """The flow run's Running time and its task runs' times, as the Prefect API recorded them
    (records arrive asynchronously: poll until every run is final and the count is stable)."""
    deadline, seen = time.monotonic() + timeout, -1
    while True:
        flow_run, runs = asyncio.run(_read_runs(flow_run_id))
        final = flow_run.state is not None and flow_run.state.is_final()
        final = final and all(r.state is not None and r.state.is_final() for r in runs)
        if (final and len(runs) == seen) or time.monotonic() > deadline:
            break
        seen = len(runs)
        time.sleep(0.5)
    intervals, per_task, gaps, last_end = [], {}, [], None
    for r in sorted(runs, key=lambda r: r.start_time.timestamp() if r.start_time else 0.0):
        if r.start_time and r.end_time:
            if last_end is not None:
                gaps.append(
                    {"before": r.name, "gap_s": round(r.start_time.timestamp() - last_end, 3)}
                )
            last_end = max(last_end or 0.0, r.end_time.timestamp())
    for r in runs:
        name = r.name.split("-")[0]
        entry = per_task.setdefault(name, {"runs": 0, "seconds": 0.0, "states": Counter()})
        entry["runs"] += 1
        entry["states"][r.state.name if r.state else "?"] += 1
        if r.start_time and r.end_time:
            span = (r.start_time.timestamp(), r.end_time.timestamp())
            intervals.append(span)
            entry["seconds"] += span[1] - span[0]
    running = None
    if flow_run.start_time and flow_run.end_time:
        running = (flow_run.end_time - flow_run.start_time).total_seconds()
    return {
        "flow_running_s": running,
        "task_busy_s": busy(intervals),
        "task_states": dict(Counter(r.state.name if r.state else "?" for r in runs)),
        "largest_gaps_between_task_runs": sorted(gaps, key=lambda g: -g["gap_s"])[:6],
        "per_task": {
            n: {"runs": e["runs"], "seconds": round(e["seconds"], 3), "states": dict(e["states"])}
            for n, e in per_task.items()
        },
    }


def stage_manifests(cfg: Any, cid: str) -> dict[str, dict[str, Any]]:
    from spade.pipeline.record import campaign_store
    from spade.storage import STAGES

    cs = campaign_store(cfg, cid)
    out = {}
    for stage in STAGES:
        m = cs.read_stage_manifest(0, stage)
        if m is not None:
            out[stage] = {"seconds": m.seconds, "status": m.status}
    return out


def source_digest() -> str:
    """Hash of the ``spade`` and ``flows`` sources: cache keys hash code read from disk, so an
    edit during the benchmark changes them and the resume recomputes more than the last stage."""
    h = hashlib.sha256()
    for path in sorted([*(REPO / "spade").rglob("*.py"), *(REPO / "flows").rglob("*.py")]):
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def fresh_script(server: Any) -> None:
    """A new scripted model for a new campaign (the script counts the designs it wrote)."""
    if server is not None:
        server.script = scripted_model()


def requests_since(server: Any, before: int) -> int | None:
    """Chat requests the stand-in answered since it had answered ``before`` (None: no stand-in)."""
    return None if server is None else len(server.chat_requests) - before


def requests(server: Any) -> int:
    return 0 if server is None else len(server.chat_requests)


def measure(cfg_for: Callable[[str], Any], server: Any, storage: Path) -> dict[str, Any]:
    from spade.storage import STAGES

    clock, source_before = Clock(), source_digest()
    with instrumented(clock):
        # 2a. the failing run (untimed; warms the process up)
        resume_cfg = cfg_for(RESUME_ID)
        fresh_script(server)
        with heldout_fails_once() as calls:
            failed, failed_wall = run_round(resume_cfg, RESUME_ID)
        if not failed.is_failed() or calls["n"] != 1:
            raise SystemExit(f"the injected heldout fault did not fail the round: {failed}")
        before = stage_manifests(resume_cfg, RESUME_ID)
        failed_info = {
            "wall_s": round(failed_wall, 3),
            "state": failed.name,
            "stages_committed": sorted(before, key=STAGES.index),
            "heldout_committed": "heldout" in before,
        }

        # 1. from scratch
        close_backends()
        clock.reset()
        cfg = cfg_for(SCRATCH_ID)
        fresh_script(server)
        r0 = requests(server)
        state, wall = run_round(cfg, SCRATCH_ID)
        if not state.is_completed():
            raise SystemExit(f"the round from scratch did not complete: {state}")
        scratch_requests = requests_since(server, r0)
        instrumented_s = clock.snapshot()
        manifests = stage_manifests(cfg, SCRATCH_ID)
        api = prefect_times(state.state_details.flow_run_id)

        # 2b. the resume
        close_backends()
        clock.reset()
        r0 = requests(server)
        resumed, resume_wall = run_round(resume_cfg, RESUME_ID)
        if not resumed.is_completed():
            raise SystemExit(f"the resumed round did not complete: {resumed}")
        resume_requests = requests_since(server, r0)
        resume_instrumented = clock.snapshot()
        after = stage_manifests(resume_cfg, RESUME_ID)
        resume_api = prefect_times(resumed.state_details.flow_run_id)
    close_backends()
    source_changed = source_digest() != source_before
    calibration = prefect_calibration(storage)

    stage_seconds = {s: m["seconds"] for s, m in manifests.items()}
    work = sum(stage_seconds.values())
    running = api["flow_running_s"] if api["flow_running_s"] is not None else wall
    backend = sum(
        instrumented_s.get(k, {}).get("seconds", 0.0) for k in ("backend_open", "backend_close")
    )
    bookkeeping = sum(instrumented_s.get(k, {}).get("seconds", 0.0) for k in BOOKKEEPING)
    cache_keys = sum(v["seconds"] for k, v in instrumented_s.items() if k.startswith("cache_key"))
    overhead = {
        "campaign_id": SCRATCH_ID,
        "wall_s": round(wall, 3),
        "stage_seconds_sum_s": round(work, 3),
        "overhead_s": round(wall - work, 3),
        "overhead_share": round((wall - work) / wall, 4),
        "aim_share": AIM_SHARE,
        "meets_aim": (wall - work) / wall < AIM_SHARE,
        "stage_seconds": stage_seconds,
        "stage_status": {s: m["status"] for s, m in manifests.items()},
        "breakdown": {
            "outside_flow_running_s": round(wall - running, 3),
            "flow_body_between_tasks_s": round(running - api["task_busy_s"], 3),
            "flow_bookkeeping_s": round(bookkeeping, 3),
            "in_tasks_outside_stages_s": round(api["task_busy_s"] - work, 3),
            "backend_open_close_s": round(backend, 3),
            "cache_key_s": round(cache_keys, 3),
            "prefect_walking_task_inputs_s": instrumented_s.get("visit_collection", {}).get(
                "seconds", 0.0
            ),
        },
        "instrumented_calls": instrumented_s,
        "prefect": api,
        "model_requests": scratch_requests,
    }
    resume = {
        "campaign_id": RESUME_ID,
        "failed_run": failed_info,
        "resume_wall_s": round(resume_wall, 3),
        "scratch_wall_s": round(wall, 3),
        "ratio_resume_to_scratch": round(resume_wall / wall, 4),
        "heldout_seconds": after.get("heldout", {}).get("seconds"),
        "recomputed_besides_heldout": sorted(
            n
            for n, e in resume_api["per_task"].items()
            if n != "heldout" and e["states"].get("Completed")
        ),
        "source_changed_during_run": source_changed,
        "stage_status": {s: m["status"] for s, m in after.items()},
        "instrumented_calls": resume_instrumented,
        "prefect": resume_api,
        "model_requests": resume_requests,
    }
    return {"overhead": overhead, "resume": resume, "prefect_calibration": calibration}


def print_table(result: dict[str, Any], title: str) -> None:
    ov, rs = result["overhead"], result["resume"]
    w, b = ov["wall_s"], ov["breakdown"]
    table = Table(title=title)
    table.add_column("measurement")
    table.add_column("seconds", justify="right")
    table.add_column("/ W", justify="right")
    rows = [
        ("round from scratch: wall time W", w),
        ("stage work S (sum of manifests' seconds)", ov["stage_seconds_sum_s"]),
        ("overhead W - S", ov["overhead_s"]),
        ("  before/after the flow run is Running", b["outside_flow_running_s"]),
        ("  flow body between task runs", b["flow_body_between_tasks_s"]),
        ("    of which flow bookkeeping calls", b["flow_bookkeeping_s"]),
        ("  inside task runs, outside stage work", b["in_tasks_outside_stages_s"]),
        ("    of which cache keys", b["cache_key_s"]),
        ("    of which backend open/close", b["backend_open_close_s"]),
        ("  Prefect walking task inputs (any thread)", b["prefect_walking_task_inputs_s"]),
        ("resume after failed heldout: T_resume", rs["resume_wall_s"]),
        ("  of which heldout stage work", rs["heldout_seconds"] or 0.0),
    ]
    for name, seconds in rows:
        table.add_row(name, f"{seconds:.2f}", f"{seconds / w:.1%}")
    Console().print(table)
    stages = Table(title="stage seconds (round from scratch)")
    stages.add_column("stage")
    stages.add_column("status")
    stages.add_column("seconds", justify="right")
    stages.add_column("/ W", justify="right")
    for stage, seconds in ov["stage_seconds"].items():
        stages.add_row(stage, ov["stage_status"][stage], f"{seconds:.2f}", f"{seconds / w:.1%}")
    Console().print(stages)
    cal = result["prefect_calibration"]
    print(
        f"Prefect alone: an empty flow {cal['empty_flow_wall_s']:.2f} s, then"
        f" {cal['per_task_s']:.3f} s per no-op task ({cal['tasks']} tasks);"
        f" the round ran {sum(ov['prefect']['task_states'].values())} task runs"
    )
    if rs["recomputed_besides_heldout"]:
        print(
            "warning: the resume recomputed more than the held-out stage:"
            f" {', '.join(rs['recomputed_besides_heldout'])}"
            + (
                " (the spade/flows sources changed during the run)"
                if rs["source_changed_during_run"]
                else ""
            )
        )
    aim = "meets" if ov["meets_aim"] else "misses"
    print(
        f"overhead share (W - S) / W = {ov['overhead_share']:.1%} ({aim} the {AIM_SHARE:.0%} aim);"
        f" T_resume / W = {rs['ratio_resume_to_scratch']:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--scripted", action="store_true", help="scripted stand-in model (the default)"
    )
    mode.add_argument("--config", type=Path, help="a campaign config (e.g. configs/demo-cpu.yaml)")
    ap.add_argument("--no-train", action="store_true", help="run.train: false")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    config_path = args.config.resolve() if args.config else None
    out = args.out.resolve()

    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # flows/ and tests/ (the scripted stand-in)
    from prefect.testing.utilities import prefect_test_harness

    train = not args.no_train
    harness: Any = (
        contextlib.nullcontext()
        if os.environ.get("PREFECT_API_URL")
        else prefect_test_harness(server_startup_timeout=120)
    )
    with tempfile.TemporaryDirectory(prefix="spade-bench-orch-") as tmp_name, harness:
        tmp = Path(tmp_name)
        with contextlib.ExitStack() as stack:
            if config_path is None:
                from tests.fakes.openai_server import FakeOpenAIServer

                server = stack.enter_context(FakeOpenAIServer(script=scripted_model()))
                mode_name = "scripted"

                def cfg_for(cid: str) -> Any:
                    return scripted_config(server, tmp, tmp / f"store-{cid}", train)
            else:
                server, mode_name = None, str(config_path)

                def cfg_for(cid: str) -> Any:
                    return file_config(config_path, tmp / f"store-{cid}", train)

            result = measure(cfg_for, server, tmp / "noop-results")

    data = {
        "machine": machine(),
        "timestamp": timestamp(),
        "mode": mode_name,
        "train": train,
        "prefect_api": os.environ.get("PREFECT_API_URL") or "prefect_test_harness (temporary)",
        **result,
    }
    write_json(out, data)
    print_table(data, f"Orchestration ({mode_name}, train={'on' if train else 'off'})")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
