"""Chat completions from any OpenAI-compatible server (vLLM in production), over httpx.

Wire format (one ``POST {base_url}/chat/completions`` per request, never streamed):

- sent: ``model`` (``ChatRequest.model`` — a LoRA adapter name on vLLM — else the backend's
  model), ``messages``, ``tools`` (only when given), ``max_tokens``, ``temperature``, ``top_p``,
  ``stop`` (only when given), ``seed`` (only when set), ``logprobs: true`` (when
  ``SamplingParams.logprobs``). With ``vllm_extras`` (default) also vLLM's documented extra
  parameters ``return_token_ids: true`` and, with log-probs, ``return_tokens_as_token_ids: true``
  (vLLM ``ChatCompletionRequest`` "extra params"; plain OpenAI rejects unknown fields, so pass
  ``vllm_extras=False`` there). ``skip_special_tokens`` is left at vLLM's default (true): the
  text stays clean and the token ids are exact either way.
- parsed: ``choices[0].message.content`` (plus any parsed ``tool_calls`` rendered back as
  ``<tool_call>{...}</tool_call>``, the environments' action format), ``choices[0].finish_reason``
  (``"length"`` kept, anything else is ``"stop"``), ``choices[0].logprobs.content[i].logprob``.
  Token ids, first found wins: ``choices[0].token_ids`` and the top-level ``prompt_token_ids``
  (vLLM with ``return_token_ids``); else the sampled ids parsed from the log-prob tokens
  ``"token_id:123"`` (older vLLM, ``return_tokens_as_token_ids``; no prompt ids then); else empty
  lists. Missing log-probs give an empty list, present but malformed ones are a bad response.

Failures are data (``Completion.failure``), never exceptions. Connection errors, dropped
connections, timeouts, 5xx and 429 are retried with exponential backoff (``backoff_initial_s``
doubling up to ``backoff_max_s``, plus up to 10 % jitter); other 4xx are not. A 4xx whose
message says the prompt does not fit is ``CONTEXT_LENGTH``. A malformed body (bad JSON, missing
fields) is ``BAD_RESPONSE`` and retried once only: a truncated body can be a one-off, a server
that always answers garbage is not worth hammering. An exhausted 429 is ``SERVER_ERROR`` (the
server is overloaded; the request itself is fine). A request that cannot be JSON-encoded is
``CLIENT_ERROR`` with ``attempts=0`` (nothing was sent). Every attempt is bounded by
``request_timeout_s`` as a whole (connect to last byte, not per read), so once admitted by the
concurrency limit a request ends within :attr:`OpenAIBackend.deadline_s` whatever the server does.

The httpx client and the concurrency semaphore belong to the event loop that first uses them;
a backend used from a new loop (e.g. successive ``asyncio.run``) makes fresh ones and abandons
the old connections, so call ``aclose()`` in the loop that used the backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from spade.config import InferenceConfig
from spade.errors import InferenceError
from spade.inference.base import (
    ChatRequest,
    Completion,
    InferenceFailure,
    InferenceFailureKind,
)

log = logging.getLogger(__name__)
_JITTER = 0.1  # at most this fraction of a delay is added at random
_CONTEXT_PATTERN = re.compile(
    r"context length|context window|maximum model length|max_model_len|prompt is too long"
    r"|context_length_exceeded",
    re.IGNORECASE,
)
_TOKEN_ID_PATTERN = re.compile(r"token_id:(-?\d+)")


class _Malformed(Exception):
    """A 2xx body that is not an OpenAI chat completion (internal: becomes BAD_RESPONSE)."""


@dataclass(frozen=True)
class _Failed:
    """One attempt's failure and whether another attempt may help."""

    kind: InferenceFailureKind
    reason: str
    retryable: bool


class OpenAIBackend:
    """The :class:`~spade.inference.base.Backend` for an OpenAI-compatible HTTP server."""

    def __init__(self, config: InferenceConfig, model: str, *, vllm_extras: bool = True) -> None:
        self._config = config
        self._model = config.served_model or model
        self._vllm_extras = vllm_extras
        self._base_url = config.base_url.rstrip("/")
        self._headers = _auth_headers(config.api_key_env)
        self._client: httpx.AsyncClient | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- Backend protocol -------------------------------------------------------------------

    @property
    def model_name(self) -> str:
        return self._model

    @model_name.setter
    def model_name(self, name: str) -> None:
        """Request another served model by default (a new checkpoint or a published adapter)."""
        self._model = name

    async def complete(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        return list(await asyncio.gather(*(self._complete_one(r) for r in requests)))

    def count_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> int | None:
        return None  # the server's tokenizer is not here; a round trip is not "cheap"

    async def aclose(self) -> None:
        # a client made under another (finished) event loop cannot be closed from this one
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client, self._semaphore, self._loop = None, None, None

    # -- limits -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def server_root(self) -> str:
        """The server's address without the ``/v1`` API prefix (where ``/health`` lives)."""
        return self._base_url.removesuffix("/v1")

    @property
    def deadline_s(self) -> float:
        """Longest a request can take once admitted: every attempt's timeout plus every backoff."""
        cfg = self._config
        backoff = sum(self._delay(i) * (1 + _JITTER) for i in range(cfg.max_retries))
        return cfg.request_timeout_s * (cfg.max_retries + 1) + backoff

    def _delay(self, retry: int) -> float:
        cfg = self._config
        return min(cfg.backoff_initial_s * 2**retry, cfg.backoff_max_s)

    # -- one request ------------------------------------------------------------------------

    async def _complete_one(self, request: ChatRequest) -> Completion:
        model = request.model or self._model
        try:  # a request that cannot be encoded is the caller's error, reported as data
            body = json.dumps(self._payload(request, model)).encode()
        except (TypeError, ValueError) as exc:
            reason = f"request is not JSON-serializable: {exc}"
            return _failed(_Failed(InferenceFailureKind.CLIENT_ERROR, reason, False), 0, model, 0)
        started: float | None = None
        bad_responses = 0
        attempt = 0
        while True:
            attempt += 1
            outcome, admitted = await self._attempt(body)
            started = admitted if started is None else started
            latency = time.monotonic() - started
            if isinstance(outcome, Completion):
                outcome.model, outcome.latency_s = model, latency
                return outcome
            bad_responses += outcome.kind is InferenceFailureKind.BAD_RESPONSE
            if not self._should_retry(outcome, attempt, bad_responses):
                return _failed(outcome, attempt, model, latency)
            await asyncio.sleep(self._delay(attempt - 1) * (1 + random.uniform(0, _JITTER)))

    def _should_retry(self, outcome: _Failed, attempt: int, bad_responses: int) -> bool:
        if not outcome.retryable or attempt > self._config.max_retries:
            return False
        return outcome.kind is not InferenceFailureKind.BAD_RESPONSE or bad_responses < 2

    def _payload(self, request: ChatRequest, model: str) -> dict[str, Any]:
        p = request.params
        payload: dict[str, Any] = {
            "model": model,
            "messages": list(request.messages),
            "max_tokens": p.max_tokens,
            "temperature": p.temperature,
            "top_p": p.top_p,
        }
        if request.tools:
            payload["tools"] = list(request.tools)
        if p.stop:
            payload["stop"] = list(p.stop)
        if p.seed is not None:
            payload["seed"] = p.seed
        if p.logprobs:
            payload["logprobs"] = True
        if self._vllm_extras:
            payload["return_token_ids"] = True
            if p.logprobs:
                payload["return_tokens_as_token_ids"] = True
        return payload

    async def _attempt(self, body: bytes) -> tuple[Completion | _Failed, float]:
        """One POST under the concurrency limit; returns the outcome and when it was admitted."""
        client, semaphore = self._ensure_client()
        url, headers = f"{self._base_url}/chat/completions", {"Content-Type": "application/json"}
        async with semaphore:
            admitted = time.monotonic()
            try:  # transport trouble is data here; _complete_one decides whether to retry it
                async with asyncio.timeout(self._config.request_timeout_s):
                    response = await client.post(url, content=body, headers=headers)
            except (TimeoutError, httpx.TimeoutException):
                reason = f"no answer within {self._config.request_timeout_s}s"
                return _Failed(InferenceFailureKind.TIMEOUT, reason, True), admitted
            except httpx.TransportError as exc:
                reason = f"{type(exc).__name__}: {exc}"
                return _Failed(InferenceFailureKind.CONNECTION, reason, True), admitted
            except httpx.RequestError as exc:  # e.g. a body that cannot be decoded
                reason = f"{type(exc).__name__}: {exc}"
                return _Failed(InferenceFailureKind.BAD_RESPONSE, reason, True), admitted
        return _classify(response), admitted

    def _ensure_client(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._client is None or self._semaphore is None or self._loop is not loop:
            limit = self._config.max_concurrency
            self._client = httpx.AsyncClient(
                headers=self._headers,
                timeout=httpx.Timeout(self._config.request_timeout_s),
                limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
            )
            self._semaphore = asyncio.Semaphore(limit)
            self._loop = loop
        return self._client, self._semaphore

    # -- server administration (set-up: failures raise InferenceError) ----------------------

    async def load_lora_adapter(self, name: str, path: str) -> None:
        """Load a LoRA adapter into a running vLLM (needs VLLM_ALLOW_RUNTIME_LORA_UPDATING)."""
        body = {"lora_name": name, "lora_path": str(path)}
        await self._admin("POST", f"{self.server_root}/v1/load_lora_adapter", body)

    async def unload_lora_adapter(self, name: str) -> None:
        await self._admin("POST", f"{self.server_root}/v1/unload_lora_adapter", {"lora_name": name})

    async def swap_lora_adapter(self, name: str, path: str, previous: str | None = None) -> None:
        """Load adapter ``name`` from ``path``, then unload ``previous`` (the version it replaces).

        An adapter already served under ``name`` (a publish retried after its load went through)
        counts as loaded. A failed unload is only logged: the old adapter keeps its slot in the
        server's adapter cache, nothing else is wrong.
        """
        try:
            await self.load_lora_adapter(name, path)
        except InferenceError:  # vLLM refuses a second load of a name: was it loaded before?
            if name not in await self.list_models():
                raise
            log.info("adapter %s is already loaded on %s", name, self.server_root)
        if previous is None or previous == name:
            return
        try:
            await self.unload_lora_adapter(previous)
        except InferenceError as exc:  # a leftover adapter wastes a cache slot, nothing more
            log.warning("could not unload the previous adapter %s: %s", previous, exc)

    async def list_models(self) -> list[str]:
        """Ids the server serves now (base model and loaded adapters), from ``GET /v1/models``."""
        response = await self._admin("GET", f"{self._base_url}/models", None)
        try:  # the listing's shape is the server's promise; a broken one is a set-up problem
            return [str(entry["id"]) for entry in response.json()["data"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise InferenceError(f"unreadable model list from {self._base_url}: {exc}") from exc

    async def health(self) -> bool:
        """Whether ``GET {server_root}/health`` answers 200 within the request timeout."""
        client, _ = self._ensure_client()
        try:  # an unreachable server is simply unhealthy
            async with asyncio.timeout(self._config.request_timeout_s):
                response = await client.get(f"{self.server_root}/health")
        except (TimeoutError, httpx.HTTPError):
            return False
        return response.status_code == 200

    async def _admin(self, method: str, url: str, body: dict[str, Any] | None) -> httpx.Response:
        client, _ = self._ensure_client()
        try:  # set-up calls are not retried: a failure here means the deployment is wrong
            async with asyncio.timeout(self._config.request_timeout_s):
                response = await client.request(method, url, json=body)
        except (TimeoutError, httpx.HTTPError) as exc:
            raise InferenceError(f"{method} {url} failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            message = _error_message(response)
            raise InferenceError(f"{method} {url} -> {response.status_code}: {message}")
        return response


# -- responses --------------------------------------------------------------------------------


def _classify(response: httpx.Response) -> Completion | _Failed:
    status = response.status_code
    if 200 <= status < 300:
        return _parse_ok(response)
    message = f"HTTP {status}: {_error_message(response)}"
    if status == 429 or status >= 500:
        return _Failed(InferenceFailureKind.SERVER_ERROR, message, True)
    if 400 <= status < 500:
        if _CONTEXT_PATTERN.search(message):
            return _Failed(InferenceFailureKind.CONTEXT_LENGTH, message, False)
        return _Failed(InferenceFailureKind.CLIENT_ERROR, message, False)
    return _Failed(InferenceFailureKind.BAD_RESPONSE, message, True)


def _parse_ok(response: httpx.Response) -> Completion | _Failed:
    try:  # a 2xx that is not a chat completion is the server's fault, reported as data
        return parse_chat_completion(response.json())
    except (ValueError, _Malformed) as exc:
        reason = f"malformed response: {exc}"[:500]
        return _Failed(InferenceFailureKind.BAD_RESPONSE, reason, True)


def parse_chat_completion(data: Any) -> Completion:
    """A :class:`Completion` from an OpenAI chat completion body (see the module docstring)."""
    choice = _first_choice(data)
    message = _field(choice, "message", dict)
    text = _message_text(message)
    finish = "length" if choice.get("finish_reason") == "length" else "stop"
    logprobs, tokens = _logprobs(choice.get("logprobs"))
    token_ids = _int_list(choice.get("token_ids"), "choices[0].token_ids")
    if token_ids is None:
        token_ids = _ids_from_tokens(tokens)
    prompt_ids = _int_list(data.get("prompt_token_ids"), "prompt_token_ids") or []
    return Completion(
        text=text,
        prompt_token_ids=prompt_ids,
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=finish,
    )


def _first_choice(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise _Malformed("body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _Malformed("no choices[0]")
    return choices[0]


def _field(obj: dict[str, Any], name: str, kind: type) -> Any:
    value = obj.get(name)
    if not isinstance(value, kind):
        raise _Malformed(f"missing or mistyped field {name!r}")
    return value


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise _Malformed("message.content is not a string")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise _Malformed("message.tool_calls is not a list")
    return content + "".join(_render_tool_call(call) for call in calls)


def _render_tool_call(call: Any) -> str:
    """A server-parsed tool call, back in the environments' ``<tool_call>`` action format."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise _Malformed("tool call without function.name")
    arguments = function.get("arguments", "{}")
    # arguments arrive as a JSON string; keep the raw string if the model wrote bad JSON
    with contextlib.suppress(ValueError):
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
    return (
        f"<tool_call>{json.dumps({'name': function['name'], 'arguments': arguments})}</tool_call>"
    )


def _logprobs(block: Any) -> tuple[list[float], list[str]]:
    if block is None:
        return [], []
    content = block.get("content") if isinstance(block, dict) else None
    if content is None:
        return [], []
    if not isinstance(content, list):
        raise _Malformed("logprobs.content is not a list")
    values, tokens = [], []
    for entry in content:
        value = entry.get("logprob") if isinstance(entry, dict) else None
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise _Malformed("logprobs.content entry without a numeric logprob")
        values.append(float(value))
        tokens.append(str(entry.get("token", "")))
    return values, tokens


def _int_list(value: Any, name: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise _Malformed(f"{name} is not a list of integers")
    return value


def _ids_from_tokens(tokens: list[str]) -> list[int]:
    """Sampled ids from ``"token_id:123"`` log-prob tokens; [] unless every token has that form."""
    matches = [_TOKEN_ID_PATTERN.fullmatch(t) for t in tokens]
    if not matches or not all(matches):
        return []
    return [int(m.group(1)) for m in matches if m]


def _error_message(response: httpx.Response) -> str:
    """The error text of an OpenAI (``{"error": {"message"}}``) or older vLLM body, else raw."""
    try:  # error bodies are often not JSON at all (proxies, crashed servers)
        body = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:500]
        if body.get("message"):
            return str(body["message"])[:500]
    return response.text[:500]


def _failed(outcome: _Failed, attempts: int, model: str, latency: float) -> Completion:
    failure = InferenceFailure(kind=outcome.kind, reason=outcome.reason, attempts=attempts)
    return Completion(finish_reason="error", model=model, latency_s=latency, failure=failure)


def _auth_headers(api_key_env: str) -> dict[str, str]:
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    return {"Authorization": f"Bearer {key}"} if key else {}
