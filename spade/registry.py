"""Choosing a pure function by name from a registry (estimators, rewards, losses)."""

from __future__ import annotations

from collections.abc import Mapping


def lookup[T](registry: Mapping[str, T], name: str, what: str) -> T:
    """``registry[name]``; a ValueError naming ``what`` and the valid names otherwise."""
    try:
        return registry[name]
    except KeyError:
        valid = ", ".join(sorted(registry))
        raise ValueError(f"unknown {what} {name!r}; valid: {valid}") from None
