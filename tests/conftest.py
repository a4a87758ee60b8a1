"""Shared fixtures: the bundled examples, and a host-leak check around the whole run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spade.envs.examples import example_paths
from tests.leaks import HostSnapshot


@pytest.fixture(scope="session", autouse=True)
def no_leftovers_after_suite():
    """Every jail the suite starts must be gone at the end: processes, cgroups, mounts, dirs."""
    before = HostSnapshot.take()
    yield
    deadline = time.monotonic() + 5  # nsjail reaps and removes cgroups as it exits
    while (leaks := HostSnapshot.take().leaks_since(before)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leaks, leaks


@pytest.fixture(params=example_paths(), ids=lambda p: p.stem)
def example_path(request) -> Path:
    return request.param


@pytest.fixture(scope="session")
def smol_cache(pytestconfig, tmp_path_factory) -> Path:
    """Where the shipped SmolLM2 is converted once; it survives between runs in pytest's cache
    folder (the conversion takes ~30 s, a cached load ~0.3 s)."""
    cache = getattr(pytestconfig, "cache", None)
    return cache.mkdir("spade-models") if cache else tmp_path_factory.mktemp("spade-models")


@pytest.fixture
def smol_env(smol_cache, monkeypatch) -> Path:
    monkeypatch.setenv("SPADE_CACHE", str(smol_cache))
    return smol_cache
