"""Per-round numbers and tables to Weights & Biases and TensorBoard, as configured in ``metrics``.

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

With ``metrics.tables`` (the default) each round also logs two tables at its step
(:mod:`spade.metrics.tables`): ``designs`` (every design attempt: code, verdict, hint, win rates,
regret, designer reward) and ``rollouts`` (``metrics.rollout_samples`` plays as text); a W&B
table each, and TensorBoard text (a table of markdown cells). A table that cannot be read or
written is a warning too, and the round's numbers are still recorded.

wandb and tensorboard are imported only when their sink is enabled (the ``metrics`` extra).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from spade.metrics.tables import DESIGN_COLUMNS, ROLLOUT_COLUMNS, RoundTables

if TYPE_CHECKING:
    from spade.config import CampaignConfig

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Where one round's numbers go besides the object store."""

    name: str

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record ``metrics`` (flat names, ``/`` groups them) at ``step``."""

    def log_tables(self, tables: RoundTables, step: int) -> None:
        """Record the round's ``designs`` and ``rollouts`` tables at ``step``."""

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

    def log_tables(self, tables: RoundTables, step: int) -> None:
        import wandb

        logged = {}
        for name, columns, rows in table_parts(tables):
            data = [[row.get(c) for c in columns] for row in rows]
            logged[name] = wandb.Table(columns=list(columns), data=data, allow_mixed_types=True)
        if logged:  # the same step as the numbers: one history row per round
            self._run.log(logged, step=step)

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

    def log_tables(self, tables: RoundTables, step: int) -> None:
        import numpy as np
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.plugins.text.summary_v2 import text_pb

        for name, columns, rows in table_parts(tables):
            # a 2-D string tensor: TensorBoard's text tab shows it as a table, each cell as
            # markdown; the first row names the columns
            cells = [[f"**{c}**" for c in columns]]
            cells += [[markdown_cell(c, row.get(c)) for c in columns] for row in rows]
            summary = text_pb(name, np.array(cells, dtype=object))
            self._writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))

    def close(self) -> None:
        self._writer.close()  # flushes; raises what the background writer hit


def table_parts(
    tables: RoundTables,
) -> list[tuple[str, tuple[str, ...], list[dict[str, Any]]]]:
    """(name, columns, rows) of each table that has rows: ``designs``, ``rollouts``."""
    parts = [("designs", DESIGN_COLUMNS, tables.designs)]
    parts.append(("rollouts", ROLLOUT_COLUMNS, tables.rollouts))
    return [(name, columns, rows) for name, columns, rows in parts if rows]


# what Python-Markdown (TensorBoard's renderer, with its tables extension) takes as markup;
# a backslash escapes each but "<", which would open HTML
_MARKDOWN = str.maketrans({c: f"\\{c}" for c in "\\`*_[]#|>"} | {"<": "&lt;"})
BLOCK_COLUMNS = frozenset({"code", "transcript", "reason"})
"""Cells shown as preformatted blocks (their line breaks and indentation kept)."""


def markdown_cell(column: str, value: Any) -> str:
    """A table cell as markdown: multi-line text in a fenced block (a fence longer than any
    run of backticks in it), other text escaped, numbers as they are, None empty."""
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    if column in BLOCK_COLUMNS:
        fence = "```"
        while fence in text:
            fence += "`"
        return f"{fence}\n{text}\n{fence}"
    return text.translate(_MARKDOWN)


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


TablesSource = Callable[[], RoundTables]
"""Reads a round's tables (from the store: :func:`spade.pipeline.tracker.round_tables`)."""


def log_round(
    cfg: CampaignConfig,
    campaign_id: str,
    round: int,
    summary_row: Mapping[str, Any],
    *,
    tables: TablesSource | None = None,
    logger: logging.Logger | logging.LoggerAdapter[Any] | None = None,
) -> list[str]:
    """Send a round's numbers (``summary_row``, from ``spade.pipeline.summary``, held-out
    suites included) to every configured sink, at ``step=round``, and with
    ``metrics.tables`` the round's tables (``tables()``, read only when a sink is on).

    Never raises: each problem is logged as a warning (on ``logger``, e.g. the flow's run
    logger, else this module's) and returned, one line per problem. Tables that cannot be
    read or written are problems of their own: the numbers are recorded all the same.
    """
    sinks = configured_sinks(cfg)
    if not sinks:
        return []
    warn = logger or log
    problems: list[str] = []
    metrics = round_metrics(summary_row)
    round_tables = None
    if tables is not None and cfg.metrics.tables:
        try:
            round_tables = tables()
        except Exception as exc:  # a reporting side channel: never fail the round
            problems.append(f"metrics: round {round}'s tables could not be read: {exc!r}")
    for name, factory in sinks:
        try:
            sink = factory(cfg, campaign_id)
            try:
                sink.log(metrics, step=round)
                if round_tables:
                    try:
                        sink.log_tables(round_tables, step=round)
                    except Exception as exc:
                        problems.append(
                            f"metrics: {name} sink did not record round {round}'s tables: {exc!r}"
                        )
            finally:
                sink.close()
        except Exception as exc:  # a reporting side channel: never fail the round
            problems.append(f"metrics: {name} sink did not record round {round}: {exc!r}")
    for problem in problems:
        warn.warning("%s (the object store has the numbers)", problem)
    return problems


__all__ = [
    "Sink",
    "TablesSource",
    "TensorBoardSink",
    "WandbSink",
    "configured_sinks",
    "log_round",
    "markdown_cell",
    "round_metrics",
    "table_parts",
]
