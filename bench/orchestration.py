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

3. Overlap (``--overlap``, scripted only): the same campaign with ``run.overlap`` 0 and 1, its
   stages given scripted durations in the proportions of the 8-GPU preset
   (``bench/orchestration_overlap.py`` says how they are derived); rounds per hour and each
   pool's busy share, side by side; JSON to ``bench/results/orchestration-overlap.json``.

Usage: ``.venv/bin/python bench/orchestration.py [--scripted | --config PATH] [--no-train]
[--overlap [--rounds 4] [--round-seconds 8] [--infer-tps T] [--train-tps T]] [--out PATH]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from orchestration_probes import (  # bench/orchestration_probes.py
    BOOKKEEPING,
    Clock,
    heldout_fails_once,
    instrumented,
    prefect_calibration,
    prefect_times,
)
from orchestration_setup import (  # bench/orchestration_setup.py
    close_backends,
    file_config,
    fresh_script,
    requests,
    requests_since,
    run_round,
    scripted_config,
    scripted_model,
    source_digest,
    stage_manifests,
)
from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
DEFAULT_OUT = BENCH / "results" / "orchestration.json"
AIM_SHARE = 0.05
SCRATCH_ID, RESUME_ID = "bench-scratch", "bench-resume"


class RoundRun(NamedTuple):
    """What one completed round measured: its wall time, the model requests it made, the
    instrumented calls, its stage manifests and the Prefect API's view of its task runs."""

    wall: float
    requests: int | None
    instrumented: dict[str, dict[str, float]]
    manifests: dict[str, dict[str, Any]]
    api: dict[str, Any]


def completed_round(cfg: Any, cid: str, server: Any, clock: Clock, what: str) -> RoundRun:
    """Run round 0 of ``cid``, which must complete (SystemExit naming ``what`` if not)."""
    r0 = requests(server)
    state, wall = run_round(cfg, cid)
    if not state.is_completed():
        raise SystemExit(f"{what} did not complete: {state}")
    return RoundRun(
        wall,
        requests_since(server, r0),
        clock.snapshot(),
        stage_manifests(cfg, cid),
        prefect_times(state.state_details.flow_run_id),
    )


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
        wall, scratch_requests, instrumented_s, manifests, api = completed_round(
            cfg, SCRATCH_ID, server, clock, "the round from scratch"
        )

        # 2b. the resume
        close_backends()
        clock.reset()
        resume_wall, resume_requests, resume_instrumented, after, resume_api = completed_round(
            resume_cfg, RESUME_ID, server, clock, "the resumed round"
        )
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


def print_overlap(data: dict[str, Any]) -> None:
    """The sequential and overlapped arms side by side."""
    per = data["scripted_s"]
    table = Table(
        title=f"Rounds in sequence vs overlapped ({data['preset']} proportions: inference"
        f" {per['inference']:.2f} s, training {per['training']:.2f} s of scripted work a round)"
    )
    for col in (
        "run.overlap",
        "rounds",
        "wall s",
        "rounds/hour",
        "inference busy",
        "training busy",
    ):
        table.add_column(col, justify="right")
    for arm in data["arms"]:
        table.add_row(
            str(arm["overlap"]), str(arm["rounds"]), f"{arm['wall_s']:.1f}",
            f"{arm['rounds_per_hour']:.1f}", f"{arm['inference_busy']:.0%}",
            f"{arm['training_busy']:.0%}",
        )  # fmt: skip
    Console().print(table)
    print(
        f"speed-up {data['speedup']:.2f}x (ideal at these proportions {data['ideal_speedup']:.2f}x)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--scripted", action="store_true", help="scripted stand-in model (the default)"
    )
    mode.add_argument("--config", type=Path, help="a campaign config (e.g. configs/demo-cpu.yaml)")
    ap.add_argument("--no-train", action="store_true", help="run.train: false")
    ap.add_argument(
        "--overlap", action="store_true", help="sequential against overlapped rounds (scripted)"
    )
    ap.add_argument("--rounds", type=int, default=4, help="--overlap: rounds per arm")
    ap.add_argument("--round-seconds", type=float, default=60.0, help="--overlap: scripted work")
    ap.add_argument("--infer-tps", type=float, default=20_000.0, help="--overlap: assumption")
    ap.add_argument("--train-tps", type=float, default=20_000.0, help="--overlap: assumption")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    if args.overlap and args.config:
        raise SystemExit("--overlap runs the scripted campaign only (no --config)")
    config_path = args.config.resolve() if args.config else None
    out = args.out.resolve()

    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # flows/ (the round's Prefect flows)
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
                from spade.testing.openai_server import FakeOpenAIServer

                server = stack.enter_context(FakeOpenAIServer(script=scripted_model()))
                mode_name = "scripted"

                def cfg_for(cid: str) -> Any:
                    return scripted_config(server, tmp, tmp / f"store-{cid}", train)
            else:
                server, mode_name = None, str(config_path)

                def cfg_for(cid: str) -> Any:
                    return file_config(config_path, tmp / f"store-{cid}", train)

            if args.overlap:
                from orchestration_overlap import measure_overlap  # bench/orchestration_overlap.py

                result = measure_overlap(
                    cfg_for,
                    lambda: fresh_script(server),
                    args.rounds,
                    args.round_seconds,
                    args.infer_tps,
                    args.train_tps,
                )
            else:
                result = measure(cfg_for, server, tmp / "noop-results")

    data = {
        "machine": machine(),
        "timestamp": timestamp(),
        "mode": mode_name,
        "train": train,
        "prefect_api": os.environ.get("PREFECT_API_URL") or "prefect_test_harness (temporary)",
        **result,
    }
    if args.overlap:
        out = out.with_name(out.stem + "-overlap.json") if args.out == DEFAULT_OUT else out
        write_json(out, data)
        print_overlap(data)
        print(f"written: {out}")
        return
    write_json(out, data)
    print_table(data, f"Orchestration ({mode_name}, train={'on' if train else 'off'})")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
