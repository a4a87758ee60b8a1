"""Chat completions from any OpenAI-compatible server (vLLM in production), over httpx.

Wire format (one ``POST {base_url}/chat/completions`` per request, never streamed):

- sent: ``model`` (``ChatRequest.model`` — a LoRA adapter name on vLLM — else the backend's
  model), ``messages``, ``tools`` (only when given), ``max_tokens``, ``temperature``, ``top_p``,
  ``presence_penalty: 0``, ``frequency_penalty: 0``, ``stop`` (only when given), ``seed`` (only
  when set), ``logprobs: true`` (when ``SamplingParams.logprobs``). With ``vllm_extras``
  (default) also vLLM's documented extra parameters: the neutral samplers ``top_k: -1``,
  ``min_p: 0``, ``repetition_penalty: 1`` and ``return_token_ids: true`` and, with log-probs,
  ``return_tokens_as_token_ids: true`` (vLLM ``ChatCompletionRequest`` "extra params"; plain
  OpenAI rejects unknown fields, so pass ``vllm_extras=False`` there). Every sampler is sent,
  neutral, rather than left to the server: a vLLM started with ``--generation-config auto``
  (its default) fills what a request leaves out from the model's generation_config.json, and
  the trainer scores softmax(logits / temperature), nothing else. ``skip_special_tokens`` is
  left at vLLM's default (true): the text stays clean and the token ids are exact either way.
- parsed: ``choices[0].message.content`` (plus any parsed ``tool_calls`` rendered back as
  ``<tool_call>{...}</tool_call>``, the environments' action format), ``choices[0].finish_reason``
  (``"length"`` kept, anything else is ``"stop"``), ``choices[0].logprobs.content[i].logprob``.
  Token ids, first found wins: ``choices[0].token_ids`` and the top-level ``prompt_token_ids``
  (vLLM with ``return_token_ids``); else the sampled ids parsed from the log-prob tokens
  ``"token_id:123"`` (older vLLM, ``return_tokens_as_token_ids``; no prompt ids then); else empty
  lists. Missing log-probs give an empty list, present but malformed ones are a bad response.

Failures are data (``Completion.failure``), never exceptions, retried as
:mod:`spade.inference.retry` says (backoff, failure kinds, the per-request deadline, one client
per event loop). A request that cannot be JSON-encoded is ``CLIENT_ERROR`` with ``attempts=0``
(nothing was sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spade.config import InferenceConfig
from spade.errors import InferenceError
from spade.inference.base import ChatRequest, Completion, InferenceFailureKind
from spade.inference.retokenize import Retokenizer, Source
from spade.inference.retry import Failed, Malformed, RetryingClient, failed

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)
_TOKEN_ID_PATTERN = re.compile(r"token_id:(-?\d+)")


class OpenAIBackend:
    """The :class:`~spade.inference.base.Backend` for an OpenAI-compatible HTTP server."""

    def __init__(
        self,
        config: InferenceConfig,
        model: str,
        *,
        vllm_extras: bool = True,
        tokenizer: Source | None = None,
    ) -> None:
        """``tokenizer``: the served model's tokenizer folder (or a function giving it), to
        re-derive token ids a server does not return; None: they stay empty."""
        self._config = config
        self._model = config.served_model or model
        self._vllm_extras = vllm_extras
        self.retokenizer = Retokenizer(tokenizer) if tokenizer is not None else None
        self._warned_no_ids = False
        self._base_url = config.base_url.rstrip("/")
        self._http = RetryingClient(
            config, concurrency=config.max_concurrency, headers=_auth_headers(config.api_key_env)
        )

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
        await self._http.aclose()

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
        return self._http.deadline_s

    # -- one request ------------------------------------------------------------------------

    async def _complete_one(self, request: ChatRequest) -> Completion:
        model = request.model or self._model
        try:  # a request that cannot be encoded is the caller's error, reported as data
            body = json.dumps(self._payload(request, model)).encode()
        except (TypeError, ValueError) as exc:
            reason = f"request is not JSON-serializable: {exc}"
            return failed(Failed(InferenceFailureKind.CLIENT_ERROR, reason, False), 0, model)
        url = f"{self._base_url}/chat/completions"
        tokens: list[str] = []  # the log-prob entries' token texts of the answer parsed last

        def parse(data: Any) -> Completion:
            completion, tokens[:] = _parse(data)
            return completion

        completion = await self._http.post(url, body, parse)
        completion.model = model
        if completion.ok and not (completion.prompt_token_ids and completion.token_ids):
            # off the event loop: a tokenizer load and a whole conversation's rendering would
            # stall every other request in flight
            await asyncio.to_thread(self._rederive, completion, request, tokens)
        return completion

    def _rederive(self, completion: Completion, request: ChatRequest, tokens: list[str]) -> None:
        if self.retokenizer is not None:
            self.retokenizer.fill(
                completion, request.messages, request.tools, tokens, request.prefill
            )
        elif not self._warned_no_ids:
            self._warned_no_ids = True
            log.warning(
                "%s returns no token ids and the backend has no tokenizer to re-derive them:"
                " its completions cannot be trained on",
                self._base_url,
            )

    def _payload(self, request: ChatRequest, model: str) -> dict[str, Any]:
        p = request.params
        messages = list(request.messages)
        if request.prefill:  # continue a started answer (vLLM's chat extension)
            messages.append({"role": "assistant", "content": request.prefill})
        payload: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_tokens": p.max_tokens,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
        }
        if request.tools:
            payload["tools"] = list(request.tools)
        if request.prefill:
            payload |= {"add_generation_prompt": False, "continue_final_message": True}
        if p.stop:
            payload["stop"] = list(p.stop)
        if p.seed is not None:
            payload["seed"] = p.seed
        if p.logprobs:
            payload["logprobs"] = True
        if self._vllm_extras:
            # -1 (off) is what every vLLM accepts; 0 only newer ones (0.32 takes both)
            payload |= {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
            payload["return_token_ids"] = True
            if p.logprobs:
                payload["return_tokens_as_token_ids"] = True
        return payload

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
        return await self._http.health(f"{self.server_root}/health")

    async def _admin(self, method: str, url: str, body: dict[str, Any] | None) -> httpx.Response:
        return await self._http.admin(method, url, body)


# -- responses --------------------------------------------------------------------------------


def parse_chat_completion(data: Any) -> Completion:
    """A :class:`Completion` from an OpenAI chat completion body (see the module docstring)."""
    return _parse(data)[0]


def _parse(data: Any) -> tuple[Completion, list[str]]:
    """The completion and its log-prob entries' token texts."""
    choice = _first_choice(data)
    message = _field(choice, "message", dict)
    text = _message_text(message)
    finish = "length" if choice.get("finish_reason") == "length" else "stop"
    logprobs, tokens = _logprobs(choice.get("logprobs"))
    token_ids = _int_list(choice.get("token_ids"), "choices[0].token_ids")
    if token_ids is None:
        token_ids = _ids_from_tokens(tokens)
    prompt_ids = _int_list(data.get("prompt_token_ids"), "prompt_token_ids") or []
    completion = Completion(
        text=text,
        prompt_token_ids=prompt_ids,
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=finish,
    )
    return completion, tokens


def _first_choice(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise Malformed("body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise Malformed("no choices[0]")
    return choices[0]


def _field(obj: dict[str, Any], name: str, kind: type) -> Any:
    value = obj.get(name)
    if not isinstance(value, kind):
        raise Malformed(f"missing or mistyped field {name!r}")
    return value


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise Malformed("message.content is not a string")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise Malformed("message.tool_calls is not a list")
    return content + "".join(_render_tool_call(call) for call in calls)


def _render_tool_call(call: Any) -> str:
    """A server-parsed tool call, back in the environments' ``<tool_call>`` action format."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise Malformed("tool call without function.name")
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
        raise Malformed("logprobs.content is not a list")
    values, tokens = [], []
    for entry in content:
        value = entry.get("logprob") if isinstance(entry, dict) else None
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise Malformed("logprobs.content entry without a numeric logprob")
        values.append(float(value))
        tokens.append(str(entry.get("token", "")))
    return values, tokens


def _int_list(value: Any, name: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise Malformed(f"{name} is not a list of integers")
    return value


def _ids_from_tokens(tokens: list[str]) -> list[int]:
    """Sampled ids from ``"token_id:123"`` log-prob tokens; [] unless every token has that form."""
    matches = [_TOKEN_ID_PATTERN.fullmatch(t) for t in tokens]
    if not matches or not all(matches):
        return []
    return [int(m.group(1)) for m in matches if m]


def _auth_headers(api_key_env: str) -> dict[str, str]:
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    return {"Authorization": f"Bearer {key}"} if key else {}
