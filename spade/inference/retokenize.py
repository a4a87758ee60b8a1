"""Token ids a server did not return, re-derived with the model's own tokenizer.

vLLM returns the prompt's and the completion's ids when asked (``return_token_ids``); older
servers ignore that field. Training needs both: the prompt's ids are the context a sample is
trained in, the completion's ids the tokens trained on, each with the sampler's log-prob (the
*behaviour* log-prob of truncated importance sampling, ``spade.training.loss.importance_weights``:
``min(exp(logp_old - logp_behaviour), cap)`` per token, so the i-th log-prob must belong to the
i-th trained id). :class:`Retokenizer` fills in what is missing, and says it did
(``Completion.token_ids_rederived``):

- prompt ids: the messages (and tools) through the tokenizer's chat template with the generation
  prompt, tokenized without extra special tokens, as vLLM renders a chat request. Exact when the
  server uses the same tokenizer folder and template; otherwise the trainer conditions on another
  prompt than the sampler saw, which shows as a gap between its old log-probs and the behaviour
  log-probs (``spade.training.behaviour.ratio_stats``) and is what the importance cap bounds.
- completion ids, when the log-prob tokens were not ids already (``"token_id:N"``, older vLLM's
  ``return_tokens_as_token_ids``, parsed exactly by :mod:`spade.inference.openai`): the text
  re-tokenized. A sampler may have produced another segmentation of the same text (or stopped on
  an end-of-turn token the text does not show), and then the server's log-probs belong to tokens
  that are not these ids. So the ids are kept only when they line up with the log-probs: as many,
  each decoding to its log-prob entry's token text (a final end-of-sequence entry counts as the
  tokenizer's EOS id). Otherwise the completion keeps no ids (it cannot be trained on: no aligned
  behaviour log-probs) and :attr:`Retokenizer.unaligned` counts it. Without log-probs (not
  requested) the re-tokenized text is kept as is.

The tokenizer is loaded from local files on first need (never the hub).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spade.errors import InferenceError
from spade.inference.base import Completion

log = logging.getLogger(__name__)

Source = str | Path | Callable[[], str | Path]
"""A tokenizer folder, or a function giving one (resolved on first need: it may convert)."""


def render_prompt(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    prefill: str = "",
) -> list[int]:
    """The conversation's token ids, as the in-process backend renders it, then the ids of the
    answer's ``prefill`` (tokenized on its own: the ids the model is given are the ids the
    trainer sees, whatever the tokenizer would merge across the boundary)."""
    text = tokenizer.apply_chat_template(
        list(messages), tools=list(tools) if tools else None, add_generation_prompt=True,
        tokenize=False,
    )  # fmt: skip
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    if prefill:
        ids = ids + list(tokenizer(prefill, add_special_tokens=False)["input_ids"])
    return ids


class Retokenizer:
    """Re-derives missing token ids of completions with the tokenizer at ``source``."""

    def __init__(self, source: Source) -> None:
        self._source = source
        self._tokenizer: Any = None
        self._lock = threading.Lock()  # fill runs in worker threads: one load, exact counters
        self.prompts = 0  # completions whose prompt ids were re-derived
        self.completions = 0  # ... whose completion ids were re-derived
        self.unaligned = 0  # ... whose re-derived ids did not line up with the log-probs

    @property
    def tokenizer(self) -> Any:
        """The tokenizer, loaded on first use; InferenceError if it cannot be."""
        if self._tokenizer is None:
            source = self._source() if callable(self._source) else self._source
            from spade.inference.models import HF_LOADING

            with HF_LOADING:
                from transformers import AutoTokenizer

                try:  # a missing or broken tokenizer folder is a set-up problem, said as such
                    self._tokenizer = AutoTokenizer.from_pretrained(
                        str(source), local_files_only=True
                    )
                except (OSError, ValueError) as exc:
                    raise InferenceError(
                        f"cannot load the tokenizer at {source} to re-derive token ids: {exc}"
                    ) from exc
        return self._tokenizer

    def fill(
        self,
        completion: Completion,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        logprob_tokens: Sequence[str],
        prefill: str = "",
    ) -> None:
        """Fill ``completion``'s missing prompt and completion ids (see the module docstring).

        ``logprob_tokens`` are the server's log-prob entries' token texts, one per log-prob;
        ``prefill`` the request's start of the answer (prompt ids, see :func:`render_prompt`).
        Thread-safe: the backend calls it off its event loop.
        """
        with self._lock:
            if not completion.prompt_token_ids:
                completion.prompt_token_ids = self.prompt_ids(messages, tools, prefill)
                completion.token_ids_rederived = True
                self.prompts += 1
            if completion.token_ids:
                return
            ids = self._completion_ids(completion, logprob_tokens)
            completion.token_ids_rederived = True
            if ids is None:
                self.unaligned += 1
                log.warning(
                    "re-tokenized completion does not line up with the server's %d log-probs: it"
                    " keeps no token ids (not trainable)",
                    len(completion.logprobs),
                )
                return
            completion.token_ids = ids
            self.completions += 1

    def prompt_ids(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        prefill: str = "",
    ) -> list[int]:
        return render_prompt(self.tokenizer, messages, tools, prefill)

    def _completion_ids(self, completion: Completion, tokens: Sequence[str]) -> list[int] | None:
        tok = self.tokenizer
        ids = list(tok(completion.text, add_special_tokens=False)["input_ids"])
        if not completion.logprobs:
            return ids
        eos = tok.eos_token_id
        if eos is not None and len(tokens) == len(ids) + 1 and tokens[-1] in ("", tok.eos_token):
            ids.append(eos)  # stopped on EOS: a log-prob entry the text does not show
            tokens = [*tokens[:-1], tok.eos_token]
        if len(ids) != len(tokens):
            return None
        decoded = [tok.decode([i], skip_special_tokens=False) for i in ids]
        return ids if decoded == list(tokens) else None
