"""The ``spade`` entry point's Prefect defaults: set unless the environment sets them."""

from __future__ import annotations

import os
import sys

import pytest

from flows import cli


def _main(monkeypatch: pytest.MonkeyPatch) -> None:
    """``spade --help`` through the entry point; what it sets is undone after the test."""
    for key in cli.PREFECT_DEFAULTS:  # recorded (set, then removed) so undo restores them
        monkeypatch.setenv(key, os.environ.get(key, ""))
        if not os.environ[key]:
            monkeypatch.delenv(key)
    monkeypatch.setattr(sys, "argv", ["spade", "--help"])
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 0


def test_the_embedded_server_gets_time_to_start_on_a_busy_machine(monkeypatch):
    for key in cli.PREFECT_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    _main(monkeypatch)
    assert os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] == "120"
    assert os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"


def test_what_the_environment_sets_wins(monkeypatch):
    monkeypatch.setenv("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "7")
    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", "DEBUG")
    _main(monkeypatch)
    assert os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] == "7"
    assert os.environ["PREFECT_LOGGING_LEVEL"] == "DEBUG"
