"""Tiny Hugging Face pieces for tests: a character-level tokenizer and a small Llama config.

Every tiny model the tests and benches build is one of these with its own sizes; the random
weights are the caller's (it seeds torch). transformers and tokenizers are imported only when
a function is called, so importing this module stays light.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import LlamaConfig, PreTrainedTokenizerFast


def char_tokenizer(specials: Sequence[str], chat_template: str) -> PreTrainedTokenizerFast:
    """One token per printable character after ``specials`` (which hold ``<unk>``, ``<pad>``
    and the end-of-turn ``<|im_end|>``), so decoded prefixes are exact prefixes of the text."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([*specials, *sorted(set(string.printable))])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>"
    )
    tok.chat_template = chat_template
    return tok


def tiny_llama_config(
    vocab_size: int, *, hidden: int, layers: int, heads: int, kv_heads: int, **more: Any
) -> LlamaConfig:
    """A Llama ``hidden`` wide (its MLP twice that) with ``layers`` layers; ``more`` are the
    other LlamaConfig fields (context length, special token ids, initializer range)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        **more,
    )
