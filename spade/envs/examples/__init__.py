"""Hand-written example environments: the seed pool of designs and the environment test fixtures.

Each module here holds one environment class (its name ends in ``Env``) written against the
contract in :mod:`spade.envs`, using only the standard library so it runs inside the sandbox.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pathlib


def example_paths() -> list[pathlib.Path]:
    """The example environment files in this folder, sorted by name (``__init__.py`` excluded)."""
    import pathlib

    folder = pathlib.Path(__file__).resolve().parent
    return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
