"""Sequential against overlapped rounds (``run.overlap``) for ``bench/orchestration.py
--overlap``: the same scripted campaign twice, its stages given scripted durations in the
proportions of the 8-GPU games preset, rounds per hour and each pool's busy share side by side.

Proportions (:func:`preset_seconds`), from ``configs/games-8gpu.yaml``'s sizes, as token
volumes per round at the caps the preset sets, turned into seconds by two throughputs:

- inference pool (vLLM, GPUs 0-3): design ``envs_per_round x attempts_per_slot x max_tokens``,
  hints ``envs_per_round x hint_max_tokens``, plays ``envs_per_round x (hinted + unhinted plays)
  x max_turns x max_tokens_per_turn`` generated tokens, at ``--infer-tps`` tokens/s;
- training pool (ZeRO-3, GPUs 4-7): the agent's unhinted episodes ``envs_per_round x
  unhinted_plays x max_turns x max_tokens_per_turn x 2`` (replies and the observations between
  them, read again) and the designer's attempts ``x max_tokens x 2`` (prompt and design), at
  ``--train-tps`` tokens/s (forward and backward).

Both throughputs are assumptions (flags, defaults 20,000 tokens/s each: a 4B model on four
GPUs per pool); only their ratio matters here. The seconds are scaled so one round's scripted
work is ``--round-seconds``. The inference pool's share is charged at the end of a round's play
half (``commit_evaluations``, once per round, in a worker thread), the training pool's in the
agent's update (``spade.pipeline.train.train``, in its worker thread); the real stages around
them run as usual with the scripted stand-in and a tiny policy, so Prefect's own overhead is in
the wall time. A pool's busy share is the union of its scripted intervals over the campaign's
wall time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PRESET = REPO / "configs" / "games-8gpu.yaml"


def preset_seconds(infer_tps: float, train_tps: float, preset: Path = PRESET) -> dict[str, Any]:
    """Per round: each pool's token volume at the preset's caps, and its seconds."""
    from spade.config import load_config

    cfg = load_config(preset)
    d, e = cfg.designer, cfg.evaluation
    turn = e.max_turns * e.max_tokens_per_turn
    inference = {
        "design": d.envs_per_round * d.attempts_per_slot * d.max_tokens,
        "hint": d.envs_per_round * d.hint_max_tokens,
        "evaluate": d.envs_per_round * (e.hinted_plays + e.unhinted_plays) * turn,
    }
    training = {
        "agent": d.envs_per_round * e.unhinted_plays * turn * 2,
        "designer": d.envs_per_round * d.attempts_per_slot * d.max_tokens * 2,
    }
    return {
        "inference_tokens": inference,
        "training_tokens": training,
        "inference_s": sum(inference.values()) / infer_tps,
        "training_s": sum(training.values()) / train_tps,
    }


class Busy:
    """Intervals each pool spent on scripted work (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.intervals: dict[str, list[tuple[float, float]]] = {"inference": [], "training": []}

    @contextlib.contextmanager
    def on(self, pool: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            with self.lock:
                self.intervals[pool].append((start, time.perf_counter()))

    def busy_s(self, pool: str) -> float:
        """The union of the pool's intervals (overlapping work counted once)."""
        total, end = 0.0, float("-inf")
        for a, b in sorted(self.intervals[pool]):
            if b > end:
                total += b - max(a, end)
                end = b
        return total


@contextlib.contextmanager
def scripted_durations(busy: Busy, inference_s: float, training_s: float) -> Iterator[None]:
    """Charge each round's scripted pool work where the flow does it (see the module doc)."""
    from spade.pipeline import evaluate as evaluate_stage
    from spade.pipeline import train as train_stage

    commit, train = evaluate_stage.commit_evaluations, train_stage.train

    def commit_evaluations(ctx: Any, evaluations: Any) -> Any:
        with busy.on("inference"):
            time.sleep(inference_s)
        return commit(ctx, evaluations)

    def train_scripted(ctx: Any, data: Any, parent: Any) -> Any:
        if data.role == "agent":  # the round's training work, charged once
            with busy.on("training"):
                time.sleep(training_s)
        return train(ctx, data, parent)

    evaluate_stage.commit_evaluations = commit_evaluations  # type: ignore[assignment]
    train_stage.train = train_scripted  # type: ignore[assignment]
    try:
        yield
    finally:
        evaluate_stage.commit_evaluations = commit  # type: ignore[assignment]
        train_stage.train = train  # type: ignore[assignment]


def run_arm(cfg: Any, cid: str, inference_s: float, training_s: float) -> dict[str, Any]:
    """One campaign of ``cfg`` with scripted durations: wall time, rounds/hour, busy shares."""
    from flows.campaign import campaign_flow
    from spade.inference.pool import close_shared_backends

    busy = Busy()
    with scripted_durations(busy, inference_s, training_s):
        t0 = time.perf_counter()
        status = asyncio.run(campaign_flow(config=cfg, campaign_id=cid))
        wall = time.perf_counter() - t0
    asyncio.run(close_shared_backends())
    rounds = sum(1 for r in status["rounds"] if r["complete"])
    return {
        "overlap": cfg.run.overlap,
        "rounds": rounds,
        "wall_s": round(wall, 3),
        "rounds_per_hour": round(rounds * 3600 / wall, 2),
        "inference_busy": round(busy.busy_s("inference") / wall, 3),
        "training_busy": round(busy.busy_s("training") / wall, 3),
    }


def measure_overlap(
    cfg_for: Any,
    reset: Callable[[], None],
    rounds: int,
    round_seconds: float,
    infer_tps: float,
    train_tps: float,
) -> dict[str, Any]:
    """Both arms, sequential first, each after ``reset`` (the scripted model starts over, so
    both arms are asked the same); their table rows and the speed-up."""
    preset = preset_seconds(infer_tps, train_tps)
    scale = round_seconds / (preset["inference_s"] + preset["training_s"])
    inference_s, training_s = preset["inference_s"] * scale, preset["training_s"] * scale
    arms = []
    for overlap in (0, 1):
        cid = f"bench-overlap-{overlap}"
        base = cfg_for(cid)
        run = base.run.model_copy(update={"overlap": overlap, "rounds": rounds})
        cfg = base.model_copy(update={"run": run})
        reset()
        arms.append(run_arm(cfg, cid, inference_s, training_s))
    return {
        "preset": str(PRESET.relative_to(REPO)),
        "preset_per_round": preset,
        "scripted_s": {"inference": round(inference_s, 3), "training": round(training_s, 3)},
        "arms": arms,
        "speedup": round(arms[1]["rounds_per_hour"] / arms[0]["rounds_per_hour"], 3),
        "ideal_speedup": round((inference_s + training_s) / max(inference_s, training_s), 3),
    }
