"""The managed llama.cpp backend against a real llama.cpp server (the shipped SmolLM2 GGUF).

One server for the module (it starts in ~2 s); the reference is transformers on the
de-quantized fp32 copy of the same GGUF (the converted cache training uses).

Tolerance of llama.cpp's log-probs against the reference. The weights are the same numbers
(de-quantizing Q4_1 is exact), but llama.cpp rounds the activations to 8 bits for its quantized
dot products and keeps K/V in fp16: the log-probs differ by quantization error, not by bugs.
Measured here (SmolLM2 Q4_1, 8 prompts, 64 tokens each, 2 threads): at
temperature 1, 374 tokens, mean |d| 0.067, p99 0.36, max 0.64; at 0.6, 421 tokens, mean 0.040,
p99 0.21, max 0.29. The tests allow twice the worst of those (mean 0.15, max 1.5), far below
what a wrong token alignment or a wrong model gives (mean |d| of several nats).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: never the hub

import httpx
import pytest
import torch

from spade.config import CampaignConfig, load_config
from spade.errors import InferenceError
from spade.inference.base import (
    Backend,
    ChatRequest,
    Completion,
    InferenceFailureKind,
    SamplingParams,
)
from spade.inference.llamacpp import (
    LlamaCppClient,
    ManagedLlamaCppBackend,
    client_files,
    load_tokenizer,
    parse_completion,
)
from spade.inference.llamacpp_lora import BaseModelInfo
from spade.inference.llamacpp_server import LlamaCppServer
from spade.inference.models import load_model_and_tokenizer, resolve_model
from spade.inference.retokenize import render_prompt
from spade.inference.retry import Malformed

MEAN_TOLERANCE, MAX_TOLERANCE = 0.15, 1.5  # nats; see the module docstring
SMOL_EOS = 2  # <|im_end|>
OVERRIDES: dict[str, object] = {
    "inference.backend": "llamacpp",
    "run.train": False,
    "inference.llamacpp.threads": 2,
    "inference.llamacpp.parallel": 4,
    "inference.llamacpp.context_tokens": 512,
    "inference.max_retries": 2,
    "inference.backoff_initial_s": 0.05,
}


@pytest.fixture(scope="module")
def cfg(cache: Path) -> CampaignConfig:
    return load_config(overrides=OVERRIDES)


@pytest.fixture(scope="module")
def reference(cfg: CampaignConfig) -> tuple[Any, Any]:
    """(model, tokenizer) of transformers on the de-quantized GGUF (converted once, cached)."""
    return load_model_and_tokenizer(resolve_model(cfg.model), "float32", "cpu")


@pytest.fixture(scope="module")
def backend(cfg: CampaignConfig, reference: tuple[Any, Any]) -> Iterator[ManagedLlamaCppBackend]:
    managed = ManagedLlamaCppBackend(cfg).start()
    yield managed
    asyncio.run(managed.aclose())
    assert not managed.server.running


def complete(backend: Backend, requests: list[ChatRequest]) -> list[Completion]:
    async def run() -> list[Completion]:
        try:  # each asyncio.run is a new loop: close this loop's connections in it
            return await backend.complete(requests)
        finally:
            if isinstance(backend, LlamaCppClient):
                await backend.aclose()

    return asyncio.run(run())


def ask(text: str, **params: Any) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], SamplingParams(**params))


def reference_logits(model: Any, completion: Completion) -> torch.Tensor:
    """The reference model's logits at each of the completion's steps, shape (T, V): row t is
    its next-token distribution after the prompt and the completion's first t tokens."""
    ids = torch.tensor([completion.prompt_token_ids + completion.token_ids])  # (1, L)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # (L, V)
    start = len(completion.prompt_token_ids) - 1
    return logits[start : start + len(completion.token_ids)]


def reference_logprobs(model: Any, completion: Completion, temperature: float = 1.0) -> list[float]:
    """The reference model's log-probs of the completion's tokens after its prompt, at
    ``temperature`` (what a sampled completion reports; greedy: 1)."""
    scaled = reference_logits(model, completion) / temperature  # (T, V)
    steps = torch.log_softmax(scaled, dim=-1)
    return steps.gather(-1, torch.tensor(completion.token_ids)[:, None]).squeeze(-1).tolist()


def deviations(model: Any, completions: list[Completion], temperature: float) -> list[float]:
    return [
        abs(ours - ref)
        for c in completions
        for ours, ref in zip(c.logprobs, reference_logprobs(model, c, temperature), strict=True)
    ]


def assert_close_to_reference(
    model: Any, completions: list[Completion], temperature: float = 1.0
) -> None:
    gaps = deviations(model, completions, temperature)
    assert gaps and sum(gaps) / len(gaps) <= MEAN_TOLERANCE, sum(gaps) / len(gaps)
    assert max(gaps) <= MAX_TOLERANCE, max(gaps)


def server_prompt_ids(root: str, messages: list[dict[str, str]]) -> list[int]:
    """llama.cpp's own rendering of the chat: its template, then its tokenizer."""
    with httpx.Client(timeout=30, trust_env=False) as http:
        text = http.post(f"{root}/apply-template", json={"messages": messages}).json()["prompt"]
        body = {"content": text, "add_special": False, "parse_special": True}
        tokens: list[int] = http.post(f"{root}/tokenize", json=body).json()["tokens"]
    return tokens


def test_a_batch_of_chats_gives_exact_ids_text_and_tempered_logprobs(backend, reference) -> None:
    model, tokenizer = reference
    prompts = ["Write a haiku about rivers.", "What is 17 times 3?", "Name three colours.", "Hi!"]
    requests = [ask(p, max_tokens=48, temperature=0.7, seed=i) for i, p in enumerate(prompts)]
    out = complete(backend, requests)
    assert isinstance(backend, Backend)
    for request, c in zip(requests, out, strict=True):
        assert c.ok, c.failure
        assert c.model == "smollm2-135m-instruct"
        messages = list(request.messages)
        assert c.prompt_token_ids == server_prompt_ids(backend.server.root_url, messages)
        assert backend.count_tokens(messages) == len(c.prompt_token_ids)
        assert len(c.logprobs) == len(c.token_ids) > 0
        assert all(math.isfinite(v) and v <= 0.0 for v in c.logprobs)
        body = c.token_ids
        if c.finish_reason == "stop":  # ended on eos: kept as the last id, not in the text
            assert body[-1] == SMOL_EOS
            body = body[:-1]
        else:
            assert c.finish_reason == "length" and len(c.token_ids) == 48
        assert tokenizer.decode(body, skip_special_tokens=True) == c.text
    assert any(c.finish_reason == "stop" for c in out)  # the short answers end on eos
    assert_close_to_reference(model, out, temperature=0.7)


def test_a_prefill_ends_the_prompt_ids_and_the_answer_continues_it(backend, reference) -> None:
    model, tokenizer = reference
    prefill = "```python\ndef add(a, b):\n"
    request = ChatRequest(
        [{"role": "user", "content": "Write add in Python."}],
        SamplingParams(max_tokens=16, temperature=0.0, stop=("```",)),
        prefill=prefill,
    )
    (done,) = complete(backend, [request])
    assert done.ok, done.failure
    chat = server_prompt_ids(backend.server.root_url, list(request.messages))
    tail = tokenizer(prefill, add_special_tokens=False)["input_ids"]
    assert done.prompt_token_ids == chat + tail  # the prefill is prompt: never sampled
    assert not done.text.startswith(prefill)
    assert_close_to_reference(model, [done])  # log-probs conditioned on the prefill


def test_the_logprobs_are_at_the_sampling_temperature(backend, reference) -> None:
    """The distribution sampled from, as the trainer computes it at the role's temperature:
    at 0.3 the reference's tempered values, far from its raw ones."""
    cold = complete(backend, [ask("Tell me about foxes.", max_tokens=32, temperature=0.3,
                                  seed=3)])  # fmt: skip
    assert cold[0].ok
    assert_close_to_reference(reference[0], cold, temperature=0.3)
    raw = deviations(reference[0], cold, 1.0)
    assert sum(raw) / len(raw) > MEAN_TOLERANCE  # the test can tell the two apart


def test_greedy_is_the_reference_models_argmax_and_repeats(backend, reference) -> None:
    """Greedy decoding repeats itself and picks, at every step, the reference's argmax after the
    same prefix. llama.cpp's logits differ from the reference's by quantization error (module
    docstring: up to MAX_TOLERANCE per log-prob), so where the reference's top two logits are
    within MAX_TOLERANCE of each other either of the two is accepted; elsewhere only the argmax."""
    request = ask("Count from one to five.", max_tokens=24, temperature=0.0)
    first, second = complete(backend, [request, request])
    assert first.ok and len(first.token_ids) > 3, first
    assert first.token_ids == second.token_ids and first.text == second.text
    logits = reference_logits(reference[0], first)  # (T, V)
    top2 = logits.topk(2, dim=-1)
    for step, chosen in enumerate(first.token_ids):
        (best, runner_up), (top, following) = top2.indices[step].tolist(), top2.values[step]
        near_tie = float(top - following) <= MAX_TOLERANCE
        allowed = {best, runner_up} if near_tie else {best}
        assert chosen in allowed, (step, chosen, allowed, float(top - following))
    assert_close_to_reference(reference[0], [first])


def test_a_seeded_request_samples_the_same_answer_alone_or_in_a_batch(backend) -> None:
    """A request's ``seed`` fixes its sample, whatever else the server is answering: what the
    designer learnability bench's paired held-out points rest on (each prompt under its own
    seed at every point). Another seed samples another answer (the seed reaches the sampler)."""
    prompt, other = "Write a haiku about rivers.", "Name three colours."
    seeded = ask(prompt, max_tokens=32, temperature=1.0, seed=7)
    (alone,) = complete(backend, [seeded])
    batch = [ask("Hi!", max_tokens=32, temperature=1.0), seeded, ask(other, max_tokens=32, seed=1)]
    beside = complete(backend, batch)[1]
    reseeded = [ask(prompt, max_tokens=32, temperature=1.0, seed=s) for s in (8, 9, 10)]
    assert alone.ok and beside.ok and beside.token_ids == alone.token_ids
    assert any(c.token_ids != alone.token_ids for c in complete(backend, reseeded))


def test_a_stop_string_cuts_the_text_and_keeps_its_tokens_logprobs(backend, reference) -> None:
    model, tokenizer = reference
    free = complete(backend, [ask("Say hello and introduce yourself.", max_tokens=40,
                                  temperature=0.0)])[0]  # fmt: skip
    words = free.text.split()
    assert len(words) > 3, free.text
    stop = words[2][1:]  # inside the third word: its token completes the stop string
    (out,) = complete(backend, [ask("Say hello and introduce yourself.", max_tokens=40,
                                    temperature=0.0, stop=(stop,))])  # fmt: skip
    assert out.ok and out.finish_reason == "stop"
    cut = free.text.index(stop)
    assert out.text == free.text[:cut]
    decoded = tokenizer.decode(out.token_ids, skip_special_tokens=True)
    assert stop in decoded and stop not in tokenizer.decode(out.token_ids[:-1])
    assert out.token_ids == free.token_ids[: len(out.token_ids)]
    assert len(out.logprobs) == len(out.token_ids)  # llama.cpp's missing ones asked again
    assert_close_to_reference(model, [out])


def test_max_tokens_ends_with_length(backend) -> None:
    (out,) = complete(backend, [ask("Write a long essay about the sea.", max_tokens=5,
                                    temperature=0.0)])  # fmt: skip
    assert out.ok and out.finish_reason == "length" and len(out.token_ids) == 5


def test_a_prompt_beyond_the_slot_context_is_a_context_length_failure(backend) -> None:
    long = "word " * 600
    (out,) = complete(backend, [ask(long, max_tokens=8)])
    assert out.failure is not None and out.failure.kind is InferenceFailureKind.CONTEXT_LENGTH
    assert out.failure.attempts == 0 and len(out.prompt_token_ids) > 512  # never sent
    # a client that believes in a larger context hears it from the server, as data, once
    client = LlamaCppClient(
        backend._inference, backend.tokenizer, backend.server.root_url, "m", context_tokens=10**6
    )
    (refused,) = complete(client, [ask(long, max_tokens=8)])
    assert refused.failure is not None, refused
    assert (refused.failure.kind, refused.failure.attempts) == (
        InferenceFailureKind.CONTEXT_LENGTH,
        1,
    )


def test_a_killed_server_is_a_connection_failure_after_retries(cfg, backend) -> None:
    server = LlamaCppServer(cfg.inference.llamacpp, backend.server.model, context_tokens=256)
    server.start()
    client = LlamaCppClient(
        cfg.inference, backend.tokenizer, server.root_url, "m", context_tokens=256
    )
    assert complete(client, [ask("Hi", max_tokens=2)])[0].ok
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    server.stop()
    (out,) = complete(client, [ask("Hi", max_tokens=2)])
    assert out.failure is not None
    assert out.failure.kind is InferenceFailureKind.CONNECTION
    assert out.failure.attempts == cfg.inference.max_retries + 1


def test_a_server_that_cannot_start_raises_with_its_log(cfg, tmp_path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file")
    server = LlamaCppServer(cfg.inference.llamacpp, broken, context_tokens=256)
    with pytest.raises(InferenceError, match="exited with code") as info:
        server.start()
    assert str(broken) in str(info.value) and not server.running


def test_answers_that_are_not_completions_are_malformed() -> None:
    params = SamplingParams()
    good = {"tokens": [5, 2], "content": "x", "stop_type": "eos",
            "completion_probabilities": [{"id": 5, "logprob": -1.0}, {"id": 2, "logprob": -0.5}]}  # fmt: skip
    assert parse_completion(good, params).logprobs == [-1.0, -0.5]
    bad = [
        [],
        good | {"tokens": [5, "2"]},
        good | {"stop_type": "mystery"},
        good | {"content": None},
        good | {"completion_probabilities": [{"id": 5, "logprob": -1.0}]},  # eos, one short
        good | {"completion_probabilities": [{"id": 6, "logprob": -1.0}, {"id": 2, "logprob": 0}]},
    ]
    for body in bad:
        with pytest.raises(Malformed):
            parse_completion(body, params)
    word = good | {"stop_type": "word", "completion_probabilities": [{"id": 5, "logprob": -1.0}]}
    assert parse_completion(word, params).logprobs == [-1.0]  # the client asks for the rest
    # stopped at its first token: llama.cpp sends no completion_probabilities at all
    first = {"tokens": [7], "content": "", "stop_type": "word"}
    assert parse_completion(first, params).logprobs == []  # the client asks for it
    with pytest.raises(Malformed):  # without a stop string the entries are never left out
        parse_completion(first | {"stop_type": "eos"}, params)


def test_the_prompt_is_rendered_by_the_models_own_template(reference) -> None:
    _, tokenizer = reference
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    ids = render_prompt(tokenizer, messages, None)
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nBe brief.") and text.endswith("assistant\n")


def test_without_a_converted_copy_the_tokenizer_is_built_from_the_gguf_once(
    backend, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path))  # nothing converted here
    model = load_config(overrides=OVERRIDES).model
    folder = client_files(model)
    assert folder.parent == tmp_path / "llamacpp" and (folder / "config.json").is_file()
    assert client_files(model) == folder  # built once
    tokenizer = load_tokenizer(folder)
    messages = [{"role": "user", "content": "Name a prime number above 10."}]
    root = backend.server.root_url
    assert render_prompt(tokenizer, messages, None) == server_prompt_ids(root, messages)
    assert BaseModelInfo.from_hf_config(json.loads((folder / "config.json").read_text())) == (
        BaseModelInfo(model_type="llama", n_layers=30, n_heads=9, n_kv_heads=3)
    )


def test_open_backend_starts_and_stops_a_managed_llamacpp_server(cfg, backend) -> None:
    from spade.inference.factory import open_backend

    async def run() -> tuple[Completion, Any]:
        async with open_backend(cfg) as opened:
            assert isinstance(opened, ManagedLlamaCppBackend) and opened.server.running
            (out,) = await opened.complete([ask("Hi!", max_tokens=4)])
        return out, opened

    out, opened = asyncio.run(run())
    assert out.ok and out.model == "smollm2-135m-instruct"
    assert not opened.server.running
