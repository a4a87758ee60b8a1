"""Inference backends behind one protocol (:class:`Backend`). torch/transformers/HTTP clients
are imported only by the backend modules that need them, never by ``import spade``."""

import os

# OpenMP threads that spin while waiting (torch's default) crawl when another busy process
# shares the cores: SmolLM2, 64 tokens on 2 cores beside one CPU hog took 12.3 s with 2 spinning
# threads, 5.7 s passive (3.5 s vs 3.9 s alone). Set before torch loads; a user's value wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from spade.inference.base import (
    Backend,
    ChatRequest,
    Completion,
    InferenceFailure,
    InferenceFailureKind,
    SamplingParams,
)

__all__ = [
    "Backend",
    "ChatRequest",
    "Completion",
    "InferenceFailure",
    "InferenceFailureKind",
    "SamplingParams",
]
