"""What a stage of the round declares about itself, in its own module (docs/architecture.md
§12.1): its name, the config it reads and the functions that are its code.

Each stage module ends with ``STAGE = Stage(...)`` (``train.py``, which holds two stages, with a
tuple of them). :mod:`spade.pipeline.keys` reads these declarations from the source, as it reads
the modules' imports, so a stage's cache key (its config sections, its code version) follows
its module without a table elsewhere; a stage that is not one of the store's built-in
:data:`spade.storage.STAGES` is added to every campaign store's stages (after the built-in
ones), so a round is complete only when it has committed too. A stage whose ``run`` is set is
run by the flows' generic stage task: adding such a stage is its module plus one line of the
round flow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Stage:
    """A stage of the round, as its module declares it.

    Written with literal values only (names, tuples of strings, a function name): the cache-key
    machinery reads it from the source (:func:`spade.pipeline.keys.read_stages`).
    """

    name: str
    """The stage's name: its folder in the store (``round-<NNNN>/<name>/``) and its task's."""
    sections: tuple[str, ...]
    """Config fields its result depends on, top-level or dotted (``"memory"``,
    ``"run.heldout_envs"``): part of its cache key."""
    entries: tuple[str, ...] = ()
    """Other functions its tasks call, ``"module:function"`` (a bare name: this module's); their
    modules' import closures are the stage's code version."""
    run: Callable[..., Any] | None = None
    """The function the flows' generic stage task calls (``run(ctx, *inputs)``, sync or async;
    it commits the stage); ``None`` for a stage with tasks of its own in ``flows/``."""


def declared_in(module: ModuleType) -> tuple[Stage, ...]:
    """The stages ``module`` declares (its ``STAGE``: one, a tuple, or none)."""
    declared = getattr(module, "STAGE", ())
    return declared if isinstance(declared, tuple) else (declared,)


__all__ = ["Stage", "declared_in"]
