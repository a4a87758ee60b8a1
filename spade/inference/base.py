"""The one protocol every inference backend speaks: batched chat completions with log-probs.

Backends: in-process transformers (:mod:`spade.inference.hf`), any OpenAI-compatible server
(:mod:`spade.inference.openai`, vLLM in production), a managed vLLM server process
(:mod:`spade.inference.vllm_server`) and a managed llama.cpp server process for CPUs
(:mod:`spade.inference.llamacpp`). A failed request is data (``Completion.failure``), not an
exception: rollouts and the designer record it and go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion."""

    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = True  # per-token log-probs of the sampled tokens (training needs them)


@dataclass(frozen=True)
class ChatRequest:
    """One conversation to continue.

    ``messages`` are OpenAI-style ``{"role", "content"}`` dicts; ``tools`` are OpenAI function
    schemas handed to the chat template. ``model`` selects a LoRA adapter or model name on
    servers that host several (None: the backend's default). ``prefill`` starts the assistant's
    answer: it is part of the prompt (its ids end ``Completion.prompt_token_ids``, so training
    never takes it for sampled tokens) and the completion's text continues it without repeating
    it; it is how a harness enforces the shape of an answer instead of asking for it.
    """

    messages: Sequence[dict[str, Any]]
    params: SamplingParams = SamplingParams()
    tools: Sequence[dict[str, Any]] | None = None
    model: str | None = None
    prefill: str = ""


class InferenceFailureKind(StrEnum):
    TIMEOUT = "timeout"  # no answer within the request timeout (after retries)
    CONNECTION = "connection"  # refused or dropped connections (after retries)
    SERVER_ERROR = "server_error"  # 5xx (after retries)
    CLIENT_ERROR = "client_error"  # 4xx: the request itself is wrong (never retried)
    BAD_RESPONSE = "bad_response"  # malformed JSON or a response without the expected fields
    CONTEXT_LENGTH = "context_length"  # the prompt does not fit the model's context
    BACKEND = "backend"  # the in-process backend raised


@dataclass(frozen=True)
class InferenceFailure:
    kind: InferenceFailureKind
    reason: str
    attempts: int = 1

    @property
    def summary(self) -> str:
        """``"<kind>: <reason>"``, as attempts and notes record it."""
        return f"{self.kind}: {self.reason}"


@dataclass
class Completion:
    """The model's answer to one request, with what training needs to learn from it.

    ``prompt_token_ids`` are the rendered conversation, ``token_ids`` / ``logprobs`` the
    sampled tokens and their log-probabilities (same length). ``model`` names the weights that
    produced it (base model, adapter or checkpoint version). ``token_ids_rederived``: the server
    did not return some of the ids and they were re-derived with the model's tokenizer
    (:mod:`spade.inference.retokenize` says when they still line up with the log-probs).
    """

    text: str = ""
    prompt_token_ids: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length" | "error"
    model: str = ""
    latency_s: float = 0.0
    failure: InferenceFailure | None = None
    token_ids_rederived: bool = False

    @property
    def ok(self) -> bool:
        return self.failure is None


@runtime_checkable
class Backend(Protocol):
    """Batched, async chat completion."""

    @property
    def model_name(self) -> str:
        """The name of the weights this backend serves now (changes when weights are published)."""
        ...

    async def complete(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        """One completion per request, in order; failures are returned, not raised."""
        ...

    def count_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> int | None:
        """Prompt length in tokens if the backend can tell cheaply, else None."""
        ...

    async def aclose(self) -> None: ...
