"""Code versions for cache keys: a hash of the source a stage runs."""

from __future__ import annotations

import hashlib
import inspect
import types
from typing import Any


def _module_of(obj: Any) -> types.ModuleType:
    if isinstance(obj, types.ModuleType):
        return obj
    module = inspect.getmodule(obj)
    if module is None:
        raise ValueError(f"cannot tell which module defines {obj!r}")
    return module


def code_version(*objs: Any) -> str:
    """First 16 hex chars of the sha256 of the source of the modules defining ``objs``.

    Each of ``objs`` is a module, or a function / class / method whose whole module is hashed
    (so a change to a helper beside the stage function changes the version too). Modules are
    hashed once each, in the order given. ValueError when a source cannot be read (built-in or
    C-extension modules, code typed at a prompt).
    """
    if not objs:
        raise ValueError("code_version needs at least one module or function")
    h = hashlib.sha256()
    seen: set[str] = set()
    for obj in objs:
        module = _module_of(obj)
        if module.__name__ in seen:
            continue
        seen.add(module.__name__)
        try:  # built-in / compiled modules have no Python source to hash
            source = inspect.getsource(module)
        except (OSError, TypeError) as exc:
            raise ValueError(f"no source for module {module.__name__}: {exc}") from exc
        h.update(module.__name__.encode() + b"\0" + source.encode() + b"\0")
    return h.hexdigest()[:16]
