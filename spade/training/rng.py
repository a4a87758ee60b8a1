"""RNG state of a training process (Python, numpy, torch CPU and CUDA), JSON-ready, so a
resumed run draws what the uninterrupted one would have."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["capture_rng_state", "restore_rng_state"]


def capture_rng_state() -> dict[str, Any]:
    """Python, numpy (when installed), torch CPU and CUDA RNG states as JSON-ready lists."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    try:
        import numpy as np
    except ImportError:  # numpy is optional: without it there is no numpy state to keep
        return state
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state["numpy"] = [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Undo :func:`capture_rng_state`: the next draws repeat those made after the capture."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])
    if "numpy" in state:
        import numpy as np

        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
