"""Naming a stored environment pool in the config: ``pool:<name>``."""

from __future__ import annotations

import re

POOL_REF = "pool:"
"""Prefix naming a pool stored by ``spade pool import`` (``pool:<name>``) where a setting
takes environment files (run.env_pool, memory.seed_pool)."""
_POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def pool_ref(entry: str) -> str | None:
    """The pool name of a ``pool:<name>`` entry; None for a path. ValueError for a malformed
    name (letters, digits, '.', '_', '-', starting with a letter or digit, at most 64)."""
    if not entry.startswith(POOL_REF):
        return None
    name = entry[len(POOL_REF) :]
    if not _POOL_NAME.fullmatch(name):
        raise ValueError(
            f"{entry!r}: a pool name is 1-64 letters, digits, '.', '_' or '-', starting with a"
            " letter or digit"
        )
    return name
