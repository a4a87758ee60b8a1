"""HTTP requests to an inference server, with retries and failures as data.

Shared by the clients of OpenAI-compatible servers (:mod:`spade.inference.openai`) and of the
managed llama.cpp server (:mod:`spade.inference.llamacpp`): one ``POST`` of a JSON body per
completion, parsed by the caller's ``parse`` function into a :class:`Completion`.

Failures are data (``Completion.failure``), never exceptions. Connection errors, dropped
connections, timeouts, 5xx and 429 are retried with exponential backoff (``backoff_initial_s``
doubling up to ``backoff_max_s``, plus up to 10 % jitter); other 4xx are not. A 4xx whose
message says the prompt does not fit is ``CONTEXT_LENGTH``. A malformed body (bad JSON, or
``parse`` raising :class:`Malformed`) is ``BAD_RESPONSE`` and retried once only: a truncated
body can be a one-off, a server that always answers garbage is not worth hammering. An exhausted
429 is ``SERVER_ERROR`` (the server is overloaded; the request itself is fine). Every attempt is
bounded by ``request_timeout_s`` as a whole (connect to last byte, not per read), so once
admitted by the concurrency limit a request ends within :attr:`RetryingClient.deadline_s`
whatever the server does.

The httpx client and the concurrency semaphore belong to the event loop that first uses them;
a client used from a new loop (e.g. successive ``asyncio.run``) makes fresh ones and abandons
the old connections, so call ``aclose()`` in the loop that used it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from spade.config import InferenceConfig
from spade.errors import InferenceError
from spade.inference.base import Completion, InferenceFailure, InferenceFailureKind

logger = logging.getLogger(__name__)

_JITTER = 0.1  # at most this fraction of a delay is added at random
_CONTEXT_PATTERN = re.compile(
    r"context length|context window|context size|maximum model length|max_model_len"
    r"|prompt is too long|context_length_exceeded",
    re.IGNORECASE,
)

Parse = Callable[[Any], Completion]
"""A 2xx JSON body -> a Completion; raises :class:`Malformed` (or ValueError) if it is not one."""


class Malformed(Exception):
    """A 2xx body that is not the expected answer (becomes a BAD_RESPONSE failure)."""


@dataclass(frozen=True)
class Failed:
    """One attempt's failure and whether another attempt may help."""

    kind: InferenceFailureKind
    reason: str
    retryable: bool


def failed(outcome: Failed, attempts: int, model: str = "", latency: float = 0.0) -> Completion:
    """The Completion that reports ``outcome`` after ``attempts`` attempts."""
    failure = InferenceFailure(kind=outcome.kind, reason=outcome.reason, attempts=attempts)
    return Completion(finish_reason="error", model=model, latency_s=latency, failure=failure)


class RetryingClient:
    """JSON POSTs under a concurrency limit, retried as the module docstring says."""

    def __init__(
        self,
        config: InferenceConfig,
        *,
        concurrency: int,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._config = config
        self._concurrency = concurrency
        self._headers = headers or {}
        self._client: httpx.AsyncClient | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def request_timeout_s(self) -> float:
        return self._config.request_timeout_s

    @property
    def deadline_s(self) -> float:
        """Longest a request can take once admitted: every attempt's timeout plus every backoff."""
        cfg = self._config
        backoff = sum(self.delay(i) * (1 + _JITTER) for i in range(cfg.max_retries))
        return cfg.request_timeout_s * (cfg.max_retries + 1) + backoff

    def delay(self, retry: int) -> float:
        cfg = self._config
        return min(cfg.backoff_initial_s * 2**retry, cfg.backoff_max_s)

    async def post(self, url: str, body: bytes, parse: Parse) -> Completion:
        """POST ``body`` until it succeeds or may not be retried; ``latency_s`` counts from the
        first admission (the model name is left to the caller)."""
        started: float | None = None
        bad_responses = 0
        attempt = 0
        while True:
            attempt += 1
            outcome, admitted = await self._attempt(url, body, parse)
            started = admitted if started is None else started
            latency = time.monotonic() - started
            if isinstance(outcome, Completion):
                outcome.latency_s = latency
                return outcome
            bad_responses += outcome.kind is InferenceFailureKind.BAD_RESPONSE
            if not self._should_retry(outcome, attempt, bad_responses):
                return failed(outcome, attempt, latency=latency)
            wait = self.delay(attempt - 1) * (1 + random.uniform(0, _JITTER))
            # said, not silent: the server sees the same request again, and a run whose
            # requests keep failing is an outage its operator wants to see before it ends
            logger.warning(
                "%s: attempt %d failed (%s: %s); retrying in %.1f s",
                url, attempt, outcome.kind.value, outcome.reason, wait,
            )  # fmt: skip
            await asyncio.sleep(wait)

    def _should_retry(self, outcome: Failed, attempt: int, bad_responses: int) -> bool:
        if not outcome.retryable or attempt > self._config.max_retries:
            return False
        return outcome.kind is not InferenceFailureKind.BAD_RESPONSE or bad_responses < 2

    async def _attempt(
        self, url: str, body: bytes, parse: Parse
    ) -> tuple[Completion | Failed, float]:
        """One POST under the concurrency limit; returns the outcome and when it was admitted."""
        client, semaphore = self.ensure_client()
        headers = {"Content-Type": "application/json"}
        async with semaphore:
            admitted = time.monotonic()
            try:  # transport trouble is data here; post() decides whether to retry it
                async with asyncio.timeout(self._config.request_timeout_s):
                    response = await client.post(url, content=body, headers=headers)
            except (TimeoutError, httpx.TimeoutException):
                reason = f"no answer within {self._config.request_timeout_s}s"
                return Failed(InferenceFailureKind.TIMEOUT, reason, True), admitted
            except httpx.TransportError as exc:
                reason = f"{type(exc).__name__}: {exc}"
                return Failed(InferenceFailureKind.CONNECTION, reason, True), admitted
            except httpx.RequestError as exc:  # e.g. a body that cannot be decoded
                reason = f"{type(exc).__name__}: {exc}"
                return Failed(InferenceFailureKind.BAD_RESPONSE, reason, True), admitted
        return classify(response, parse), admitted

    def ensure_client(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        """This event loop's httpx client and semaphore (made on first use in a loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._semaphore is None or self._loop is not loop:
            limit = self._concurrency
            self._client = httpx.AsyncClient(
                headers=self._headers,
                timeout=httpx.Timeout(self._config.request_timeout_s),
                limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
            )
            self._semaphore = asyncio.Semaphore(limit)
            self._loop = loop
        return self._client, self._semaphore

    async def aclose(self) -> None:
        # a client made under another (finished) event loop cannot be closed from this one
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client, self._semaphore, self._loop = None, None, None

    # -- set-up calls (not retried: failures raise InferenceError) ---------------------------

    async def health(self, url: str) -> bool:
        """Whether ``GET url`` answers 200 within the request timeout."""
        client, _ = self.ensure_client()
        try:  # an unreachable server is simply unhealthy
            async with asyncio.timeout(self._config.request_timeout_s):
                response = await client.get(url)
        except (TimeoutError, httpx.HTTPError):
            return False
        return response.status_code == 200

    async def admin(self, method: str, url: str, body: dict[str, Any] | None) -> httpx.Response:
        """One administration call; a transport error or a non-200 answer is InferenceError."""
        client, _ = self.ensure_client()
        try:  # set-up calls are not retried: a failure here means the deployment is wrong
            async with asyncio.timeout(self._config.request_timeout_s):
                response = await client.request(method, url, json=body)
        except (TimeoutError, httpx.HTTPError) as exc:
            raise InferenceError(f"{method} {url} failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            message = error_message(response)
            raise InferenceError(f"{method} {url} -> {response.status_code}: {message}")
        return response


def classify(response: httpx.Response, parse: Parse) -> Completion | Failed:
    """A response as a parsed Completion or a failed attempt (with whether to retry it)."""
    status = response.status_code
    if 200 <= status < 300:
        try:  # a 2xx that is not the expected answer is the server's fault, reported as data
            return parse(response.json())
        except (ValueError, Malformed) as exc:
            reason = f"malformed response: {exc}"[:500]
            return Failed(InferenceFailureKind.BAD_RESPONSE, reason, True)
    message = f"HTTP {status}: {error_message(response)}"
    if status == 429 or status >= 500:
        return Failed(InferenceFailureKind.SERVER_ERROR, message, True)
    if 400 <= status < 500:
        if _CONTEXT_PATTERN.search(message):
            return Failed(InferenceFailureKind.CONTEXT_LENGTH, message, False)
        return Failed(InferenceFailureKind.CLIENT_ERROR, message, False)
    return Failed(InferenceFailureKind.BAD_RESPONSE, message, True)


def error_message(response: httpx.Response) -> str:
    """The error text of an OpenAI or llama.cpp (``{"error": {"message"}}``) or older vLLM
    body, else the raw text."""
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
