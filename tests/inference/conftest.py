"""Fixtures of the inference tests that load the shipped SmolLM2 once per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def cache(smol_cache: Path) -> Iterator[Path]:
    """``SPADE_CACHE`` at the converted SmolLM2's cache for a whole module (``smol_env`` for
    module-scoped fixtures)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPADE_CACHE", str(smol_cache))
        yield smol_cache
