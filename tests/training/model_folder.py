"""Checks that a checkpoint folder is a Hugging Face model folder holding given weights."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def assert_model_folder(
    folder: Path, trained: Mapping[str, torch.Tensor], base_model: Path
) -> None:
    """``folder`` loads offline as a transformers model with exactly ``trained`` (which differ
    from ``base_model``'s weights) and a tokenizer that encodes and templates as the base's."""
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert set(loaded.state_dict()) == set(trained)
    for key, value in loaded.state_dict().items():
        assert torch.equal(value, trained[key]), key
    base = AutoModelForCausalLM.from_pretrained(base_model).state_dict()
    assert any(not torch.equal(base[k], trained[k]) for k in trained)  # it did train
    tokenizer, original = (
        AutoTokenizer.from_pretrained(folder),
        AutoTokenizer.from_pretrained(base_model),
    )
    text = "a game of 7 moves, Hello, world!"
    assert tokenizer(text).input_ids == original(text).input_ids
    messages = [{"role": "user", "content": "hi"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == (
        original.apply_chat_template(messages, tokenize=False)
    )
