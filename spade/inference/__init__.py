"""Inference backends behind one protocol (:class:`Backend`). torch/transformers/HTTP clients
are imported only by the backend modules that need them, never by ``import spade``."""

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
