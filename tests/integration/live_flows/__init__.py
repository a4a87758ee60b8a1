"""Test-only flows deployed onto a live Prefect server (see tests/integration/prefect_live.py)."""
