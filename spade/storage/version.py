"""Code versions for cache keys: a hash of the source files of the modules a stage runs."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path


def _source_path(name: str) -> Path:
    try:  # find_spec imports the parent packages (light), never the module itself
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:  # a parent package missing, or a bad name
        raise ValueError(f"no module {name}: {exc}") from exc
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise ValueError(f"no Python source for module {name}")
    return Path(spec.origin)


def code_version(*modules: str) -> str:
    """First 16 hex chars of the sha256 of the named modules' source files.

    The files are read, never imported: ``spade.sandbox.server`` is the in-jail server, which
    must not run on the host (importing it would point this process's stdout at stderr).
    Modules are hashed once each, in the order given; ValueError for a module without a
    Python source file (built-in, compiled, missing) or for no module at all.
    """
    if not modules:
        raise ValueError("code_version needs at least one module name")
    h = hashlib.sha256()
    for name in dict.fromkeys(modules):
        h.update(name.encode() + b"\0" + _source_path(name).read_bytes() + b"\0")
    return h.hexdigest()[:16]
