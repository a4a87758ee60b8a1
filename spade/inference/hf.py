"""In-process chat completions with transformers (the embedded default; CPU or one GPU).

How requests become completions:

- **Prompt**: ``apply_chat_template(messages, tools=..., add_generation_prompt=True)``, tokenized
  without extra special tokens. Nothing is truncated: prompt + ``max_tokens`` above
  ``max_context_tokens`` is a ``CONTEXT_LENGTH`` failure.
- **Batching**: requests from all concurrent :meth:`complete` calls are queued and served
  together, so one-request-per-call rollouts still batch. Requests are grouped by their sampling
  parameters (one ``generate`` call takes one configuration), sorted by prompt length and cut into
  batches of ``batch_size``, left-padded.
- **Sampling**: temperature 0 is greedy; otherwise temperature and top-p, nothing else: the model's
  ``generation_config`` is replaced by its special tokens only (hub configs carry top_k and
  penalties, transformers' default is top_k=50: all would change what a request asked for), and
  top_k is set to 0 (off). A request with a ``seed`` is generated alone under
  ``torch.random.fork_rng`` + ``manual_seed``: its sample depends on the seed only, not on its
  batch companions, and the global RNG is left untouched.
- **Stops**: generation ends at an eos token (kept as the last token id: training must learn to
  stop; never in ``text``) or at a stop string (``stop_strings`` in ``generate``). As in the
  OpenAI API, the text is cut just before the first stop string; the token ids (and log-probs)
  are cut just after the token that completes it. ``finish_reason`` is ``"stop"`` for either,
  ``"length"`` when ``max_tokens`` ran out.
- **Log-probs** are those of the sampled tokens under the distribution they were sampled from,
  the request's temperature applied (``log_softmax(logits / T)``; greedy: ``T = 1``): what the
  managed llama.cpp and vLLM servers report too (llama.cpp's post-sampling probabilities, vLLM's
  ``processed_logprobs``), and what the trainer computes at the role's sampling temperature, so
  the importance ratios compare one distribution. Top-p is not applied here (no role samples
  with it; the servers would renormalise over the nucleus). They are gathered
  step by step by a logits processor, not with ``output_logits=True``, which keeps every step's
  (batch, vocab) logits: 6,144 design tokens x 8 x 49,152 x 4 bytes is ~9.7 GB.
- **Failures**: a chat-template error fails its request, a ``generate`` error its batch, both as
  ``BACKEND`` data; errors in our own post-processing propagate.

Generation runs in one serving thread, started on demand, so callers' event loops stay
responsive; callers may sit on different event loops (concurrent Prefect tasks each run their
own) and are still batched together: results go back through each caller's loop
(``call_soon_threadsafe``). A lock keeps one generation (or weight swap) at a time.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import torch

from spade.config import InferenceConfig, ModelConfig
from spade.errors import InferenceError
from spade.inference.base import (
    ChatRequest,
    Completion,
    InferenceFailure,
    InferenceFailureKind,
    SamplingParams,
)
from spade.inference.models import (
    HF_LOADING,
    eos_token_ids,
    load_model_and_tokenizer,
    load_state_into,
    pick_device,
    read_state_dict,
    resolve_model,
)
from spade.inference.retokenize import render_prompt

with HF_LOADING:  # transformers' lazy imports are not thread-safe (models.HF_LOADING)
    from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

log = logging.getLogger(__name__)
_Job = tuple[int, list[int]]  # (request index, prompt token ids)
_Queued = tuple[ChatRequest, "asyncio.Future[Completion]", asyncio.AbstractEventLoop]


def _settle(future: asyncio.Future[Completion], result: Completion | BaseException) -> None:
    """Complete a caller's future on its own loop (unless it was cancelled meanwhile)."""
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


class _LogprobRecorder(LogitsProcessor):
    """Log-probs of the sampled tokens at ``temperature``, one step at a time.

    ``generate`` calls it once per step with ``input_ids`` (B, prompt + t) and that step's raw
    float32 logits (B, V): custom processors run before the temperature/top-p warpers, and the
    backend's generation config enables no other processor, so the temperature is applied here.
    The token of step t is known only at step t + 1 (last column of ``input_ids``), so one
    (B, V) log-softmax is kept until then.
    """

    def __init__(self, temperature: float = 1.0) -> None:
        self._temperature = temperature
        self._steps: list[torch.Tensor] = []  # (B,) per step whose token is known
        self._last: torch.Tensor | None = None  # (B, V) log-softmax of the latest step

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._last is not None:
            self._steps.append(self._last.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self._last = torch.log_softmax(scores.float() / self._temperature, dim=-1)
        return scores

    def logprobs(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) log-probs of the generated ``new_tokens`` (B, T)."""
        steps = self._steps[: new_tokens.shape[1]]
        if len(steps) < new_tokens.shape[1] and self._last is not None:  # the final step
            steps.append(self._last.gather(-1, new_tokens[:, len(steps)].unsqueeze(-1)).squeeze(-1))
        return torch.stack(steps, dim=1)  # generate() makes at least one token


class TransformersBackend:
    """The :class:`~spade.inference.base.Backend` protocol over a local transformers model.

    Loads the model in ``__init__`` (blocking; build it with ``asyncio.to_thread`` from async
    code). :meth:`reload` swaps in new weights and bumps the version in :attr:`model_name`.
    """

    def __init__(self, model_config: ModelConfig, inference_config: InferenceConfig) -> None:
        self._resolved = resolve_model(model_config)
        self._device = pick_device(model_config.device)
        model, tokenizer = load_model_and_tokenizer(
            self._resolved, model_config.dtype, self._device
        )
        self._model: Any = model
        self._tokenizer: Any = tokenizer
        self._max_context = model_config.max_context_tokens
        self._batch_size = inference_config.batch_size
        self._eos_ids = eos_token_ids(model, tokenizer)
        self._pad_id: int = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self._eos_ids[0]
        )
        model.generation_config = GenerationConfig(  # special tokens only: see module docstring
            bos_token_id=model.generation_config.bos_token_id,
            eos_token_id=self._eos_ids,
            pad_token_id=self._pad_id,
        )
        self._warned_tools = False
        self._lock = threading.Lock()  # one generate() or weight swap at a time
        self._version = 0
        self._version_label = "v0"
        self._queue: list[_Queued] = []
        self._queue_lock = threading.Lock()
        self._server: threading.Thread | None = None

    @property
    def model_name(self) -> str:
        """``<resolved name>@<weights version>``, e.g. ``smollm2-135m-instruct@v0``."""
        return f"{self._resolved.name}@{self._version_label}"

    @property
    def model(self) -> Any:
        return self._model

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def complete(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        if self._model is None:
            raise InferenceError("the transformers backend is closed")
        if not requests:
            return []
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Completion]] = [loop.create_future() for _ in requests]
        with self._queue_lock:
            self._queue.extend((r, f, loop) for r, f in zip(requests, futures, strict=True))
        await asyncio.sleep(0)  # let this loop's other callers queue theirs: one batch for all
        with self._queue_lock:
            if self._server is None and self._queue:
                self._server = threading.Thread(
                    target=self._serve, name="spade-transformers-generate", daemon=True
                )
                self._server.start()
        return list(await asyncio.gather(*futures))

    def _serve(self) -> None:
        """Serve everything queued, batch after batch; exit when the queue is empty (the next
        :meth:`complete` starts a new server thread)."""
        while True:
            with self._queue_lock:
                if not self._queue:
                    self._server = None
                    return
                queued, self._queue = self._queue, []
            live = [q for q in queued if not q[1].done()]  # skip cancelled callers
            try:
                results: list[Any] = self._complete_sync([r for r, _, _ in live])
            except Exception as exc:  # our own bug: these callers get it, later ones go on
                results = [exc] * len(live)
            for (_, future, loop), result in zip(live, results, strict=True):
                try:  # the caller's loop may have closed meanwhile: nobody waits any more
                    loop.call_soon_threadsafe(_settle, future, result)
                except RuntimeError:
                    continue

    def count_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> int | None:
        """Length of the templated prompt; None when the chat template rejects the messages."""
        try:
            return len(self._prompt_ids(messages, tools))
        except Exception:  # the template's own error is reported by complete() as data
            return None

    def reload(
        self, source: str | Path | Mapping[str, torch.Tensor], version: str | None = None
    ) -> str:
        """Swap in new weights (a state dict, a save_pretrained folder or a weights file).

        Shapes and names must match the loaded model (tied weights may be omitted). Waits for the
        running generation, bumps the version (``version`` or ``v<n>``) and returns the new
        :attr:`model_name`. Raises :class:`InferenceError` when the weights do not fit.
        """
        state = source if isinstance(source, Mapping) else read_state_dict(Path(source))
        with self._lock:
            if self._model is None:
                raise InferenceError("the transformers backend is closed")
            load_state_into(self._model, state)
            self._version += 1
            self._version_label = version or f"v{self._version}"
        log.info("weights of %s reloaded", self.model_name)
        return self.model_name

    def load_weights(self, path: str | Path, version: str | None = None) -> str:
        """:meth:`reload` from a folder or file."""
        return self.reload(Path(path), version)

    async def aclose(self) -> None:
        with self._lock:
            self._model = None
        gc.collect()
        if self._device.type == "cuda":
            torch.cuda.empty_cache()

    # -- in the worker thread ------------------------------------------------------------------

    def _prompt_ids(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        prefill: str = "",
    ) -> list[int]:
        if tools and not self._warned_tools and "tools" not in str(self._tokenizer.chat_template):
            self._warned_tools = True  # SmolLM2's template drops tools silently: easy to miss
            log.warning("the chat template of %s ignores tools", self._resolved.name)
        return render_prompt(self._tokenizer, messages, tools, prefill)

    def _complete_sync(self, requests: list[ChatRequest]) -> list[Completion]:
        results: list[Completion | None] = [None] * len(requests)
        groups: dict[tuple[Any, ...], list[_Job]] = {}
        with self._lock:
            if self._model is None:
                raise InferenceError("the transformers backend is closed")
            for index, request in enumerate(requests):
                try:
                    prompt = self._prompt_ids(request.messages, request.tools, request.prefill)
                except Exception as exc:  # jinja/tokenizer errors: bad messages are data
                    results[index] = self._failed([], f"chat template failed: {exc!r}")
                    continue
                params = request.params
                if len(prompt) + params.max_tokens > self._max_context:
                    results[index] = self._failed(
                        prompt,
                        f"prompt of {len(prompt)} tokens + max_tokens {params.max_tokens} exceeds "
                        f"max_context_tokens {self._max_context}",
                        InferenceFailureKind.CONTEXT_LENGTH,
                    )
                    continue
                groups.setdefault(_group_key(params, index), []).append((index, prompt))
            for jobs in groups.values():
                jobs.sort(key=lambda job: len(job[1]))  # similar lengths pad less
                params = requests[jobs[0][0]].params  # the key makes these equal in the group
                for start in range(0, len(jobs), self._batch_size):
                    chunk = jobs[start : start + self._batch_size]
                    for (index, _), done in zip(chunk, self._run(chunk, params), strict=True):
                        results[index] = done
        return cast(list[Completion], results)  # every index was filled above

    def _failed(
        self,
        prompt: list[int],
        reason: str,
        kind: InferenceFailureKind = InferenceFailureKind.BACKEND,
        latency_s: float = 0.0,
    ) -> Completion:
        return Completion(
            prompt_token_ids=prompt,
            finish_reason="error",
            model=self.model_name,
            latency_s=latency_s,
            failure=InferenceFailure(kind, reason),
        )

    def _run(self, jobs: list[_Job], params: SamplingParams) -> list[Completion]:
        """Generate one left-padded batch and turn each row into a Completion."""
        prompts = [prompt for _, prompt in jobs]
        started = time.perf_counter()
        try:
            tokens, logprobs = self._generate(prompts, params)
        except Exception as exc:  # OOM, device errors, ...: this batch fails, as data
            log.warning("generation failed for %d requests: %r", len(prompts), exc)
            if self._device.type == "cuda":
                torch.cuda.empty_cache()
            reason = f"generate failed: {type(exc).__name__}: {exc}"
            latency = time.perf_counter() - started
            return [self._failed(p, reason, latency_s=latency) for p in prompts]
        latency = time.perf_counter() - started
        return [
            self._finish(p, t, lp, params, latency)
            for p, t, lp in zip(prompts, tokens, logprobs, strict=True)
        ]

    def _generate(
        self, prompts: list[list[int]], params: SamplingParams
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Token ids and their log-probs at the request's temperature (both B lists of
        max_tokens or fewer, padding included)."""
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self._pad_id, dtype=torch.long)  # (B, L)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, L)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
        sample = params.temperature > 0
        config = GenerationConfig(
            max_new_tokens=params.max_tokens,
            do_sample=sample,
            temperature=params.temperature if sample else 1.0,
            top_p=params.top_p if sample else 1.0,
            top_k=0 if sample else None,  # 0: off (the default 50 is not OpenAI semantics)
            stop_strings=list(params.stop) or None,
            eos_token_id=self._eos_ids,
            pad_token_id=self._pad_id,
        )
        recorder = _LogprobRecorder(params.temperature if sample else 1.0)
        with torch.inference_mode(), _seeded(params.seed if sample else None, self._device):
            output = self._model.generate(
                input_ids=input_ids.to(self._device),
                attention_mask=attention_mask.to(self._device),
                generation_config=config,
                logits_processor=LogitsProcessorList([recorder]),
                tokenizer=self._tokenizer if params.stop else None,  # stop_strings needs it
            )
        new_tokens = output[:, width:]  # (B, T), T <= max_tokens
        return new_tokens.tolist(), recorder.logprobs(new_tokens).cpu().tolist()

    def _finish(
        self,
        prompt: list[int],
        tokens: list[int],
        logprobs: list[float],
        params: SamplingParams,
        latency_s: float,
    ) -> Completion:
        """Trim one row at its eos or first stop string; padding after either is dropped."""
        stopped = False
        for position, token in enumerate(tokens):
            if token in self._eos_ids:
                tokens, stopped = tokens[: position + 1], True
                break
        body = tokens[:-1] if stopped else tokens  # the eos token is not text
        text = self._decode(body)
        cut = min((i for s in params.stop if (i := text.find(s)) >= 0), default=-1)
        if cut >= 0:
            tokens = body[: self._tokens_through_stop(body, params.stop)]
            text, stopped = text[:cut], True
        return Completion(
            text=text,
            prompt_token_ids=prompt,
            token_ids=tokens,
            logprobs=logprobs[: len(tokens)] if params.logprobs else [],
            finish_reason="stop" if stopped or len(tokens) < params.max_tokens else "length",
            model=self.model_name,
            latency_s=latency_s,
        )

    def _decode(self, tokens: list[int]) -> str:  # exact text: no clean-up of spaces
        decoded = self._tokenizer.decode(
            tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        return str(decoded)

    def _tokens_through_stop(self, tokens: list[int], stops: Sequence[str]) -> int:
        """The fewest leading tokens whose text holds a stop string (binary search on decode)."""
        low, high = 1, len(tokens)  # the full sequence holds one: the caller checked
        while low < high:
            mid = (low + high) // 2
            if any(s in self._decode(tokens[:mid]) for s in stops):
                high = mid
            else:
                low = mid + 1
        return low


def _group_key(params: SamplingParams, index: int) -> tuple[Any, ...]:
    """Requests with equal keys can share one generate() call."""
    if params.temperature <= 0:  # greedy: top_p and seed play no part
        return (False, params.max_tokens, params.stop)
    alone = index if params.seed is not None else None  # seeded samples are generated alone
    return (True, params.temperature, params.top_p, params.max_tokens, params.stop, alone)


@contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed torch's RNG (CPU and this device) for the block, restoring the global state after."""
    if seed is None:
        yield
        return
    devices = [device.index] if device.type == "cuda" else []  # pick_device sets the index
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
