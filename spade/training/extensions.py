"""Where DeepSpeed's JIT-compiled ops are built and cached (``TORCH_EXTENSIONS_DIR``).

No torch import here: ``scripts/bootstrap.sh`` asks for the folder on every run.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

__all__ = ["ensure_extensions_dir", "extensions_dir"]


def extensions_dir() -> Path:
    """``TORCH_EXTENSIONS_DIR`` if set, else ``$SPADE_CACHE/torch_extensions/<environment>``.

    One folder per Python environment (its resolved ``sys.prefix``, hashed): two checkouts'
    environments on one machine build the same op with different include paths, and in one
    shared folder each rebuilt what the other had just built (ninja sees a changed build file),
    while the other's ranks waited on the build lock (two ``make test`` side by side timed out
    their DeepSpeed tests that way)."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"])
    cache = Path(os.environ.get("SPADE_CACHE") or "~/.cache/spade").expanduser()
    prefix = os.path.realpath(sys.prefix)
    key = hashlib.sha256(prefix.encode()).hexdigest()[:12]
    return cache / "torch_extensions" / f"{Path(prefix).name.lstrip('.')}-{key}"


def ensure_extensions_dir() -> Path:
    """:func:`extensions_dir`, created and set as ``TORCH_EXTENSIONS_DIR`` (where DeepSpeed's
    JIT builds go; launched ranks inherit it)."""
    path = extensions_dir()
    os.environ["TORCH_EXTENSIONS_DIR"] = str(path)
    path.mkdir(parents=True, exist_ok=True)
    return path
