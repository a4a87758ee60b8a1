"""Per-round numbers to Weights & Biases and TensorBoard, as configured in ``metrics``.

The object store holds every number of a round (``spade status`` reads them back from there);
these sinks are copies for the dashboards teams already use. So :func:`log_round` never raises:
a sink that cannot start, write or close is a warning with its reason, and the round goes on.

Each call opens the sink, writes one step (``step = round``) and closes it again, so nothing
stays open between rounds (a round takes minutes to hours; opening costs about a second) and a
campaign that crashes or resumes in another process continues where it was:

- W&B: one run per campaign, ``id = campaign_id`` with ``resume="allow"``, so every round of a
  campaign — in any process, after any restart — lands in the same run. Offline runs
  (``metrics.wandb_mode: offline``, the default) leave one folder per round under ``$WANDB_DIR``
  with that same run id; ``wandb sync`` uploads them into one run, in order.
- TensorBoard: one folder per campaign, ``<tensorboard_dir>/<campaign_id>``, one event file per
  round in it; TensorBoard reads a folder's files as one run.

wandb and tensorboard are imported only when their sink is enabled (the ``metrics`` extra).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from spade.config import CampaignConfig

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Where one round's numbers go besides the object store."""

    name: str

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record ``metrics`` (flat names, ``/`` groups them) at ``step``."""

    def close(self) -> None:
        """Flush and release whatever the sink holds."""


class WandbSink:
    """A Weights & Biases run per campaign, resumed by campaign id."""

    name = "wandb"

    def __init__(self, cfg: CampaignConfig, campaign_id: str) -> None:
        import wandb

        self._run = wandb.init(
            id=campaign_id,
            resume="allow",
            mode=cfg.metrics.wandb_mode,
            project=cfg.metrics.wandb_project,
            name=campaign_id,
            group=cfg.name,
            job_type="spade-campaign",
            # Identifying fields only: the full config may carry storage credentials.
            config={"campaign_id": campaign_id, "name": cfg.name, "model": cfg.model.name_or_path},
            # Never end a run someone else opened in this process, and never take over the
            # flow's stdout (the run is open for a second; Prefect owns the console).
            reinit="create_new",
            settings=wandb.Settings(console="off", silent=True),
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        # A step below the run's last one (a round logged again) is dropped by wandb itself,
        # with its own warning: the first numbers of a round stay, as in the store.
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


class TensorBoardSink:
    """Scalars in a TensorBoard event file under ``<tensorboard_dir>/<campaign_id>``.

    tensorboard's own event writer (what torch's SummaryWriter wraps), so no torch needed.
    """

    name = "tensorboard"

    def __init__(self, cfg: CampaignConfig, campaign_id: str) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        assert cfg.metrics.tensorboard_dir is not None
        self.log_dir = Path(cfg.metrics.tensorboard_dir).expanduser() / campaign_id
        self._writer = EventFileWriter(str(self.log_dir))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=k, simple_value=float(v)) for k, v in metrics.items()]
        self._writer.add_event(
            Event(wall_time=time.time(), step=step, summary=Summary(value=values))
        )

    def close(self) -> None:
        self._writer.close()  # flushes; raises what the background writer hit


SinkFactory = Callable[["CampaignConfig", str], Sink]
"""Builds a sink for (config, campaign id); building is where a sink connects or opens files."""


def configured_sinks(cfg: CampaignConfig) -> list[tuple[str, SinkFactory]]:
    """The enabled sinks as (name, factory): built one at a time, so one failing to start
    does not keep the others from writing."""
    sinks: list[tuple[str, SinkFactory]] = []
    if cfg.metrics.wandb:
        sinks.append((WandbSink.name, WandbSink))
    if cfg.metrics.tensorboard_dir:
        sinks.append((TensorBoardSink.name, TensorBoardSink))
    return sinks


def _is_number(value: Any) -> bool:
    # bool is an int to Python, not a measurement (``complete``); None is a missing number.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _flatten(prefix: str, value: Any, out: dict[str, float]) -> None:
    if _is_number(value):
        out[prefix] = float(value)
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            _flatten(f"{prefix}/{key}", inner, out)


def round_metrics(summary_row: Mapping[str, Any]) -> dict[str, float]:
    """Every numeric column of a round's summary, flat: nested columns become ``column/key``
    (``stage_seconds/design``, ``rejections/timeout``); each held-out suite's numbers
    (column ``heldout_suites``) become ``heldout/<suite>/<field>`` (``heldout/humaneval/score``).
    ``round`` is the step and ``replay_of`` a round index, not metrics; text (the weights
    version), flags and missing values are left out."""
    out: dict[str, float] = {}
    for column, value in summary_row.items():
        if column not in ("round", "replay_of"):
            _flatten("heldout" if column == "heldout_suites" else str(column), value, out)
    # W&B and TensorBoard take NaN, but the store's JSON never holds one; keep only finite.
    return {k: v for k, v in out.items() if math.isfinite(v)}


def log_round(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
    summary_row: Mapping[str, Any],
    *,
    logger: logging.Logger | logging.LoggerAdapter[Any] | None = None,
) -> list[str]:
    """Send a round's numbers (``summary_row``, from ``spade.pipeline.summary``, held-out
    suites included) to every configured sink, at ``step=round``.

    Never raises: each problem is logged as a warning (on ``logger``, e.g. the flow's run
    logger, else this module's) and returned, one line per problem.
    """
    sinks = configured_sinks(cfg)
    if not sinks:
        return []
    warn = logger or log
    problems: list[str] = []
    metrics = round_metrics(summary_row)
    for name, factory in sinks:
        try:
            sink = factory(cfg, campaign_id)
            try:
                sink.log(metrics, step=round)
            finally:
                sink.close()
        except Exception as exc:  # a reporting side channel: never fail the round
            problems.append(f"metrics: {name} sink did not record round {round}: {exc!r}")
    for problem in problems:
        warn.warning("%s (the object store has the numbers)", problem)
    return problems


__all__ = [
    "Sink",
    "TensorBoardSink",
    "WandbSink",
    "configured_sinks",
    "log_round",
    "round_metrics",
]
