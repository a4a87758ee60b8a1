"""Fixtures: this test process's sandbox metrics endpoint; W&B offline into a tmp folder."""

from __future__ import annotations

import pytest

from spade.metrics import prom
from spade.processes import free_port
from tests.metrics.readers import OfflineRun, offline_runs


@pytest.fixture(scope="session")
def metrics_port() -> int:
    """The port this process serves its sandbox metrics on (started here unless it already
    is: a process has one endpoint)."""
    if (port := prom.served_port()) is None:
        port = free_port()
        assert prom.start_metrics_server(port, addr="127.0.0.1")
    return port


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B offline into ``tmp_path``; returns a reader of the runs written there.

    wandb reads its settings (``WANDB_DIR``) once per process, when its service starts, and
    ``finish()`` returns before that service has flushed an offline run to disk: tearing the
    service down before and after each test gives every test its own folder and complete files.
    """
    import wandb

    wandb.teardown()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")

    def read() -> list[OfflineRun]:
        wandb.teardown()
        return offline_runs(tmp_path)

    yield read
    wandb.teardown()
