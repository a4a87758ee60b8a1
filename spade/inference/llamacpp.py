"""Chat completions from a managed llama.cpp server, with exact token ids and their log-probs.

Requests are rendered here, with the model's own Hugging Face tokenizer (as the in-process
backend does: ``apply_chat_template(messages, tools=..., add_generation_prompt=True)``, then
tokenized without extra special tokens), and the token ids are sent to llama.cpp's native
``POST /completion``, so ``prompt_token_ids`` are exactly what the model saw. Sent: ``prompt``
(ids), ``n_predict`` (``max_tokens``), ``temperature`` (0: greedy), ``top_p``, and every other
sampler made neutral (llama.cpp defaults to top_k 40, min_p 0.05, ...: they would change the
distribution a request asked for), ``seed`` (when set), ``stop`` (when given),
``return_tokens``, ``n_probs: 1`` (with log-probs; sampling, also ``post_sampling_probs``) and
``cache_prompt``.

Parsed: ``tokens`` (the sampled ids; an eos token stays as the last id, as in the in-process
backend: training must learn to stop), ``content`` (the text, cut before a stop string as the
OpenAI API does; the token ids run through the token that completed it), the sampled tokens'
log-probabilities and ``stop_type`` (``"limit"`` -> finish_reason ``"length"``,
``"eos"``/``"word"`` -> ``"stop"``). A sampled token's log-prob is under the distribution it was
sampled from (``completion_probabilities[i].prob`` after llama.cpp's sampler chain: the
temperature, top-p when asked, nothing else), what the trainer computes at the role's sampling
temperature; greedy, it is the raw ``logprob``. Measured on the shipped SmolLM2 (Q4_1) at
temperature 0.6: mean |d| 0.05 nats from transformers' ``log_softmax(logits / 0.6)``, max 0.24
(the raw values were 0.44 and 2.6 away). The few tokens of a stop string, which llama.cpp leaves
out, are scored by a forced greedy step: raw, not tempered (the update's mismatch metrics count
them).

A prompt plus ``max_tokens`` beyond a slot's context (``inference.llamacpp.context_tokens``,
else ``model.max_context_tokens``) is a ``CONTEXT_LENGTH`` failure without a request; a chat
template that rejects the messages is a ``CLIENT_ERROR``; both with ``attempts=0``. Transport
trouble is retried as :mod:`spade.inference.retry` says. Up to ``parallel`` requests are in
flight (the server's slots, batched together).

The tokenizer (and the model's Hugging Face config, which adapter conversion needs) is cached as
a small folder (:func:`client_files`): building it from a GGUF file takes ~10 s for SmolLM2 and
~1 min for Qwen2.5-0.5B on two cores; the converted copy of :mod:`spade.inference.models` is used
when it exists. :class:`ManagedLlamaCppBackend` is the server process and a client together.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Self

from spade.config import CampaignConfig, InferenceConfig, ModelConfig
from spade.errors import ConfigError
from spade.inference.base import ChatRequest, Completion, InferenceFailureKind, SamplingParams
from spade.inference.llamacpp_server import LlamaCppServer
from spade.inference.models import resolve_model
from spade.inference.retokenize import render_prompt
from spade.inference.retry import Failed, Malformed, RetryingClient, failed

log = logging.getLogger(__name__)
_NEUTRAL = {  # llama.cpp's other samplers, off: only temperature and top_p act
    "top_k": 0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "dry_multiplier": 0.0,
    "xtc_probability": 0.0,
    "mirostat": 0,
}
_STOP_TYPES = {"eos": "stop", "word": "stop", "limit": "length"}


# -- the model's files ------------------------------------------------------------------------


def gguf_path(model: ModelConfig) -> Path:
    """The GGUF file llama.cpp serves for ``model``; ConfigError if the model has none."""
    resolved = resolve_model(model)
    if resolved.gguf_file is None or not isinstance(resolved.path, Path):
        raise ConfigError(
            f"inference.backend 'llamacpp' serves GGUF weights; model.name_or_path"
            f" {model.name_or_path!r} resolves to {resolved.path} without a .gguf file (give a"
            " .gguf file, a folder holding one, or a shipped alias)"
        )
    return resolved.path / resolved.gguf_file


def client_files(model: ModelConfig) -> Path:
    """A folder with the model's tokenizer and ``config.json``: the converted copy of the GGUF
    model if it exists, else ``$SPADE_CACHE/llamacpp/<name>-<hash>`` (built once)."""
    from spade.inference.models import (
        HF_LOADING,
        cache_root,
        converted_cache_dir,
        save_pretrained_once,
    )

    resolved = resolve_model(model)
    gguf_path(model)  # GGUF weights, or a ConfigError naming the field
    converted = converted_cache_dir(resolved)
    if (converted / "config.json").is_file():
        return converted
    target = cache_root().parent / "llamacpp" / converted.name
    if (target / "config.json").is_file():
        return target
    assert isinstance(resolved.path, Path)
    log.info("building the tokenizer of %s from its GGUF file (once)", resolved.name)
    with HF_LOADING:
        from transformers import AutoConfig, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(resolved.path, gguf_file=resolved.gguf_file)
        config = AutoConfig.from_pretrained(resolved.path, gguf_file=resolved.gguf_file)
    save_pretrained_once(target, tokenizer, config)
    return target


def load_tokenizer(folder: Path) -> Any:
    """The tokenizer in ``folder``; ConfigError if it cannot render chats."""
    from spade.inference.models import HF_LOADING

    with HF_LOADING:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
    if getattr(tokenizer, "chat_template", None) is None:
        raise ConfigError(f"the tokenizer in {folder} has no chat template")
    return tokenizer


def context_tokens(cfg: CampaignConfig) -> int:
    """Each slot's context: ``inference.llamacpp.context_tokens``, else the model's."""
    return cfg.inference.llamacpp.context_tokens or cfg.model.max_context_tokens


def prompt_length(
    tokenizer: Any, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
) -> int | None:
    """The exact prompt length; None when the chat template rejects the messages."""
    try:
        return len(render_prompt(tokenizer, messages, tools))
    except Exception:  # the template's own error is reported by complete() as data
        return None


# -- the client ---------------------------------------------------------------------------------


class LlamaCppClient:
    """The :class:`~spade.inference.base.Backend` for a llama.cpp server at ``root_url``."""

    def __init__(
        self,
        config: InferenceConfig,
        tokenizer: Any,
        root_url: str,
        model_name: str,
        *,
        context_tokens: int,
    ) -> None:
        self._tokenizer = tokenizer
        self.root_url = root_url
        self._model = model_name
        self._context = context_tokens
        self._http = RetryingClient(config, concurrency=config.llamacpp.parallel)

    @property
    def model_name(self) -> str:
        return self._model

    @model_name.setter
    def model_name(self, name: str) -> None:
        self._model = name

    @property
    def root_url(self) -> str:
        return self._root_url

    @root_url.setter
    def root_url(self, url: str) -> None:
        """Send later requests to another server (the managed one, restarted)."""
        self._root_url = url.rstrip("/")

    @property
    def deadline_s(self) -> float:
        return self._http.deadline_s

    async def complete(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        return list(await asyncio.gather(*(self._complete_one(r) for r in requests)))

    def count_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> int | None:
        return prompt_length(self._tokenizer, messages, tools)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _complete_one(self, request: ChatRequest) -> Completion:
        model, params = self._model, request.params
        try:  # jinja or tokenizer errors: the request's messages are wrong, reported as data
            prompt = render_prompt(
                self._tokenizer, request.messages, request.tools, request.prefill
            )
        except Exception as exc:
            reason = f"chat template failed: {exc!r}"
            return failed(Failed(InferenceFailureKind.CLIENT_ERROR, reason, False), 0, model)
        if len(prompt) + params.max_tokens > self._context:
            reason = (
                f"prompt of {len(prompt)} tokens + max_tokens {params.max_tokens} exceeds the"
                f" {self._context} tokens of a llama.cpp slot"
            )
            out = failed(Failed(InferenceFailureKind.CONTEXT_LENGTH, reason, False), 0, model)
        else:
            body = json.dumps(_payload(prompt, params)).encode()
            out = await self._post(body, partial(parse_completion, params=params))
            if out.ok and len(out.logprobs) < len(out.token_ids) and params.logprobs:
                out = await self._stop_tail_logprobs(prompt, out)
        out.model, out.prompt_token_ids = model, prompt
        return out

    async def _post(self, body: bytes, parse: Any) -> Completion:
        return await self._http.post(f"{self._root_url}/completion", body, parse)

    async def _stop_tail_logprobs(self, prompt: list[int], out: Completion) -> Completion:
        """Log-probs of the tokens at a stop string, which llama.cpp leaves out of its answer.

        Each is asked for alone: the prefix up to it, one greedy token forced with a logit bias;
        llama.cpp reports the raw (unbiased) log-prob of that token. A failure fails ``out``.
        """
        tail: list[float] = []
        for j in range(len(out.logprobs), len(out.token_ids)):
            token = out.token_ids[j]
            body = json.dumps(_forced(prompt + out.token_ids[:j], token)).encode()
            one = await self._post(body, partial(parse_forced, token=token))
            if not one.ok:
                one.latency_s += out.latency_s
                return one
            tail += one.logprobs
        out.logprobs = out.logprobs + tail
        return out


def _forced(prefix: list[int], token: int) -> dict[str, Any]:
    """One greedy step that must produce ``token`` (its log-prob is reported unbiased)."""
    return {
        "prompt": prefix,
        "n_predict": 1,
        "temperature": 0.0,
        "logit_bias": [[token, 1e9]],
        "n_probs": 1,
        "return_tokens": True,
        "cache_prompt": True,
    }


def parse_forced(data: Any, token: int) -> Completion:
    """The log-prob of ``token`` from the answer to :func:`_forced`."""
    probs = data.get("completion_probabilities") if isinstance(data, dict) else None
    entry = probs[0] if isinstance(probs, list) and len(probs) == 1 else None
    value = entry.get("logprob") if isinstance(entry, dict) else None
    if not isinstance(entry, dict) or entry.get("id") != token or not isinstance(value, float):
        raise Malformed(f"no log-prob of the forced token {token}")
    return Completion(token_ids=[token], logprobs=[value])


def _payload(prompt: list[int], params: SamplingParams) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "prompt": prompt,
        "n_predict": params.max_tokens,
        "temperature": max(params.temperature, 0.0),
        "top_p": params.top_p,
        **_NEUTRAL,
        "return_tokens": True,
        "cache_prompt": True,
    }
    if params.seed is not None:
        payload["seed"] = params.seed
    if params.stop:
        payload["stop"] = list(params.stop)
    if params.logprobs:
        payload["n_probs"] = 1
        if params.temperature > 0:  # the distribution sampled from, temperature applied
            payload["post_sampling_probs"] = True
    return payload


def _entry_logprob(entry: dict[str, Any]) -> float | None:
    """The sampled token's log-prob of one entry: ``logprob`` (raw), or the log of ``prob``
    (post-sampling); None when neither is a number (or the probability is not positive: the
    token was sampled, so 0 means a broken answer)."""
    value = entry.get("logprob")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    prob = entry.get("prob")
    if isinstance(prob, int | float) and not isinstance(prob, bool) and prob > 0:
        return math.log(prob)
    return None


def parse_completion(data: Any, params: SamplingParams) -> Completion:
    """A :class:`Completion` from a ``/completion`` answer (see the module docstring)."""
    if not isinstance(data, dict):
        raise Malformed("body is not a JSON object")
    tokens, content, stop_type = data.get("tokens"), data.get("content"), data.get("stop_type")
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        raise Malformed("tokens is not a list of integers")
    if not isinstance(content, str):
        raise Malformed("content is not a string")
    if stop_type not in _STOP_TYPES:
        raise Malformed(f"unknown stop_type {stop_type!r}")
    logprobs: list[float] = []
    if params.logprobs:
        probs = data.get("completion_probabilities")
        if probs is None and stop_type == "word":  # stopped at its first token: no entries
            probs = []
        # at a stop string llama.cpp leaves out the last tokens' entries (the client asks again)
        shorter = stop_type == "word" and isinstance(probs, list) and len(probs) < len(tokens)
        if not isinstance(probs, list) or (len(probs) != len(tokens) and not shorter):
            raise Malformed("completion_probabilities do not match the tokens")
        for entry, token in zip(probs, tokens[: len(probs)], strict=True):
            if not isinstance(entry, dict):
                raise Malformed("a completion_probabilities entry is not an object")
            value = _entry_logprob(entry)
            if entry.get("id") != token or value is None:
                raise Malformed("a completion_probabilities entry without its token's logprob")
            logprobs.append(value)
    return Completion(
        text=content, token_ids=tokens, logprobs=logprobs, finish_reason=_STOP_TYPES[stop_type]
    )


# -- server and client together -----------------------------------------------------------------


class ManagedLlamaCppBackend:
    """A :class:`LlamaCppServer` and a :class:`LlamaCppClient` to it, as one Backend.

    ``start()`` launches the server (blocking); ``serve(adapters, name)`` restarts it with
    other GGUF LoRA adapters (none: the base weights) and names the weights ``name`` in later
    completions; :meth:`client` makes another client (bound to the caller's event loop) to the
    same server. ``aclose()`` closes the client and stops the server.
    """

    def __init__(self, cfg: CampaignConfig, *, log_path: str | Path | None = None) -> None:
        self._inference = cfg.inference
        self.context_tokens = context_tokens(cfg)
        self.files = client_files(cfg.model)
        self.tokenizer = load_tokenizer(self.files)
        self.base_name = resolve_model(cfg.model).name
        self.server = LlamaCppServer(
            cfg.inference.llamacpp,
            gguf_path(cfg.model),
            context_tokens=self.context_tokens,
            log_path=log_path,
        )
        self.weights_name = self.base_name
        self._client: LlamaCppClient | None = None

    def start(self) -> Self:
        self.server.start()
        return self

    def serve(self, adapters: Sequence[Path], name: str) -> None:
        """Restart the server with ``adapters`` (blocking, a few seconds); later completions
        record ``name``. Clients made by :meth:`client` keep the old address: make new ones."""
        self.server.restart(adapters)
        self.weights_name = name
        if self._client is not None:  # its connections to the old server are simply dropped
            self._client.root_url, self._client.model_name = self.server.root_url, name

    def client(self) -> LlamaCppClient:
        """A new client to the running server (cheap: the tokenizer is shared)."""
        return LlamaCppClient(
            self._inference,
            self.tokenizer,
            self.server.root_url,
            self.weights_name,
            context_tokens=self.context_tokens,
        )

    @property
    def model_name(self) -> str:
        return self.weights_name

    async def complete(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        if self._client is None:
            self._client = self.client()
        return await self._client.complete(requests)

    def count_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> int | None:
        return prompt_length(self.tokenizer, messages, tools)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        await asyncio.to_thread(self.server.stop)
