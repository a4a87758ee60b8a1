"""Fixtures for integration tests. The live-Prefect ones (a real server, a process worker,
a client, a headless Chromium) live in `prefect_live.py`; they start nothing unless a test
asks for them."""

from tests.integration.prefect_live import (  # noqa: F401  (fixtures, used by name)
    browser,
    prefect_client,
    prefect_server,
    prefect_worker,
)
