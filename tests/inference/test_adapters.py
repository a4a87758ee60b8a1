"""Adding LoRA adapters: peft's wrap without the deprecation warning it raises in transformers."""

from __future__ import annotations

import warnings

from spade.config import ModelConfig
from spade.inference.adapters import add_adapter, peft
from spade.inference.models import HF_LOADING, load_model_and_tokenizer, resolve_model
from spade.testing.scripted_designer import write_tiny_policy

DEPRECATED = "`is_gradient_checkpointing` is deprecated"


def _wrap(tmp_path, wrap) -> list[str]:
    resolved = resolve_model(ModelConfig(name_or_path=str(write_tiny_policy(tmp_path))))
    model, _ = load_model_and_tokenizer(resolved, "float32", "cpu")
    config = peft().LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM")
    with warnings.catch_warnings(record=True) as seen, HF_LOADING:
        warnings.simplefilter("always")
        wrapped = wrap(model, config)
    assert any("lora_A" in name for name, _ in wrapped.named_parameters())
    return [str(w.message) for w in seen]


def test_peft_alone_warns_that_a_transformers_attribute_is_deprecated(tmp_path) -> None:
    # why add_adapter exists: when an upgrade stops this, add_adapter's filter can go
    assert any(DEPRECATED in m for m in _wrap(tmp_path, peft().get_peft_model))


def test_add_adapter_wraps_without_that_warning_and_leaves_the_filters_as_they_were(
    tmp_path,
) -> None:
    before = list(warnings.filters)
    assert not any(DEPRECATED in m for m in _wrap(tmp_path, add_adapter))
    assert warnings.filters == before
