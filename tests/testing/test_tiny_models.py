"""The tiny Hugging Face pieces: a tokenizer with one token per character, and a Llama config
whose MLP is twice its width."""

from __future__ import annotations

from spade.testing.tiny_models import char_tokenizer, tiny_llama_config


def test_char_tokenizer_has_one_token_per_character_after_the_specials():
    tok = char_tokenizer(["<unk>", "<pad>", "<|im_end|>"], "{{ messages[0]['content'] }}")
    ids = tok("ab c").input_ids
    assert len(ids) == 4 and min(ids) >= 3
    assert tok.decode(ids) == "ab c"
    assert (tok.unk_token_id, tok.pad_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "hi"


def test_tiny_llama_config_sizes():
    config = tiny_llama_config(
        64, hidden=16, layers=1, heads=2, kv_heads=1, max_position_embeddings=128
    )
    assert (config.vocab_size, config.hidden_size, config.intermediate_size) == (64, 16, 32)
    assert (config.num_hidden_layers, config.num_attention_heads) == (1, 2)
    assert (config.num_key_value_heads, config.max_position_embeddings) == (1, 128)
