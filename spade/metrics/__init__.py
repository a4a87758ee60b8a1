"""Reporting side channels: per-round numbers to W&B / TensorBoard, live sandbox metrics.

The object store is the source of truth for every number a round produces; what this package
sends elsewhere is a copy for dashboards, and a sink that fails never fails a round.

- :mod:`spade.metrics.sinks` — ``log_round``: a round's summary, and its designs and a sample
  of its rollouts as tables, to Weights & Biases and/or TensorBoard (``metrics.wandb``,
  ``metrics.tensorboard_dir``, ``metrics.tables``; docs/tracker.md).
- :mod:`spade.metrics.tables` — those tables' rows, built from the stage files' rows (plain
  functions; :mod:`spade.pipeline.tracker` reads the store).
- :mod:`spade.metrics.prom` — Prometheus counters and histograms of jailed sessions, and the
  HTTP endpoint that serves them (``metrics.prometheus_port``).

Nothing is imported here: the sandbox imports :mod:`spade.metrics.prom` on every session, and
neither it nor ``import spade`` should pay for the sinks' modules (or wandb, tensorboard).
"""
