"""OpenAIBackend against the scripted OpenAI-compatible stand-in on loopback.

Each test gets a fresh stand-in; faults are planned per chat request. Timeouts and backoffs are
small so the whole file runs in a few seconds.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from spade.config import InferenceConfig
from spade.errors import InferenceError
from spade.inference.base import (
    Backend,
    ChatRequest,
    Completion,
    InferenceFailureKind,
    SamplingParams,
)
from spade.inference.openai import OpenAIBackend, parse_chat_completion
from spade.testing.openai_server import (
    FakeOpenAIServer,
    echo,
    render_prompt,
    token_logprob,
    tokenize,
)

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer("base-model", script=echo) as s:
        yield s


def make_config(url: str, **overrides: Any) -> InferenceConfig:
    values: dict[str, Any] = {
        "backend": "openai",
        "base_url": url,
        "request_timeout_s": 2.0,
        "max_retries": 3,
        "backoff_initial_s": 0.01,
        "backoff_max_s": 0.04,
        "max_concurrency": 8,
    }
    return InferenceConfig(**(values | overrides))


def complete(
    url: str, requests: Sequence[ChatRequest], *, vllm_extras: bool = True, **overrides: Any
) -> list[Completion]:
    async def go() -> list[Completion]:
        backend = OpenAIBackend(
            make_config(url, **overrides), "base-model", vllm_extras=vllm_extras
        )
        try:  # the client must be closed even when an assertion inside fails
            return await backend.complete(requests)
        finally:
            await backend.aclose()

    return asyncio.run(go())


def one(url: str, request: ChatRequest | None = None, **overrides: Any) -> Completion:
    return complete(url, [request or ChatRequest(MESSAGES)], **overrides)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- normal completions --------------------------------------------------------------------------


def test_completion_carries_text_logprobs_and_token_ids(server: FakeOpenAIServer) -> None:
    params = SamplingParams(max_tokens=64, temperature=0.6, top_p=0.9, stop=("\n\n",), seed=7)
    tools = [{"type": "function", "function": {"name": "look", "parameters": {}}}]
    out = one(server.url, ChatRequest(MESSAGES, params=params, tools=tools))

    assert out.ok and out.text == "hi there" and out.finish_reason == "stop"
    assert out.model == "base-model" and out.latency_s > 0
    assert out.token_ids == tokenize("hi there")
    assert out.logprobs == [token_logprob(t) for t in tokenize("hi there")]
    assert out.prompt_token_ids == tokenize(render_prompt(MESSAGES))
    sent = server.chat_requests[0]
    assert sent == {
        "model": "base-model",
        "messages": MESSAGES,
        "tools": tools,
        "max_tokens": 64,
        "temperature": 0.6,
        "top_p": 0.9,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "stop": ["\n\n"],
        "seed": 7,
        "logprobs": True,
        "top_k": -1,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
    }


def test_token_ids_fall_back_to_logprob_tokens_on_older_servers() -> None:
    with FakeOpenAIServer("base-model", script=echo, return_token_ids_supported=False) as srv:
        out = one(srv.url)
    assert out.ok and out.token_ids == tokenize("hi there") and out.prompt_token_ids == []


def test_without_logprobs_or_vllm_extras_only_openai_fields_are_sent(
    server: FakeOpenAIServer,
) -> None:
    request = ChatRequest(MESSAGES, params=SamplingParams(logprobs=False))
    out = complete(server.url, [request], vllm_extras=False)[0]
    assert out.ok and out.text == "hi there"
    assert out.logprobs == [] and out.token_ids == [] and out.prompt_token_ids == []
    sent = server.chat_requests[0]
    assert not {"logprobs", "return_token_ids", "return_tokens_as_token_ids", "stop", "seed"} & set(
        sent
    )
    assert not {"top_k", "min_p", "repetition_penalty"} & set(sent)  # vLLM's, not OpenAI's
    assert sent["presence_penalty"] == sent["frequency_penalty"] == 0.0


def test_max_tokens_cut_gives_finish_reason_length(server: FakeOpenAIServer) -> None:
    out = one(server.url, ChatRequest(MESSAGES, params=SamplingParams(max_tokens=3)))
    assert out.text == "hi " and out.finish_reason == "length" and len(out.logprobs) == 3


def test_results_keep_request_order_and_failures_do_not_spoil_the_batch() -> None:
    with FakeOpenAIServer("base-model", script=echo, max_context=200) as srv:
        requests = [
            ChatRequest(
                [{"role": "user", "content": "first"}], params=SamplingParams(max_tokens=8)
            ),
            ChatRequest(
                [{"role": "user", "content": "x" * 500}], params=SamplingParams(max_tokens=8)
            ),
            ChatRequest(
                [{"role": "user", "content": "third"}], params=SamplingParams(max_tokens=8)
            ),
        ]
        out = complete(srv.url, requests)
    assert [c.text for c in out] == ["first", "", "third"]
    assert out[1].failure is not None and out[1].finish_reason == "error"


def test_server_parsed_tool_calls_come_back_in_action_format() -> None:
    body = {
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [
                        {"function": {"name": "get", "arguments": '{"id": 3}'}},
                        {"function": {"name": "bad", "arguments": "{not json"}},
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    out = parse_chat_completion(body)
    assert out.text == (
        '<tool_call>{"name": "get", "arguments": {"id": 3}}</tool_call>'
        '<tool_call>{"name": "bad", "arguments": "{not json"}</tool_call>'
    )
    assert out.finish_reason == "stop" and out.token_ids == [] and out.logprobs == []


def test_api_key_comes_from_the_named_environment_variable(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPADE_TEST_KEY", "sekret")
    one(server.url, api_key_env="SPADE_TEST_KEY")
    monkeypatch.delenv("SPADE_TEST_KEY")
    one(server.url, api_key_env="SPADE_TEST_KEY")
    chats = [r for r in server.requests if r.path == "/v1/chat/completions"]
    headers = [{k.lower(): v for k, v in r.headers.items()} for r in chats]
    assert headers[0]["authorization"] == "Bearer sekret"
    assert "authorization" not in headers[1]


def test_backend_protocol_and_reuse_across_event_loops(server: FakeOpenAIServer) -> None:
    backend = OpenAIBackend(make_config(server.url), "base-model")
    assert isinstance(backend, Backend) and backend.count_tokens(MESSAGES) is None

    async def go() -> Completion:
        try:  # close the client in the loop that made it
            return (await backend.complete([ChatRequest(MESSAGES)]))[0]
        finally:
            await backend.aclose()

    for _ in range(2):  # each asyncio.run gets its own client
        assert asyncio.run(go()).ok


def test_served_model_overrides_the_model_name(server: FakeOpenAIServer) -> None:
    backend = OpenAIBackend(make_config(server.url, served_model="served"), "base-model")
    assert backend.model_name == "served"
    backend.model_name = "base-model"

    async def go() -> Completion:
        try:  # close the client in the loop that made it
            return (await backend.complete([ChatRequest(MESSAGES)]))[0]
        finally:
            await backend.aclose()

    assert asyncio.run(go()).model == "base-model"


# -- LoRA adapters and server administration -----------------------------------------------------


def test_lora_adapter_is_selected_by_model_name(server: FakeOpenAIServer) -> None:
    async def go() -> list[Completion]:
        backend = OpenAIBackend(make_config(server.url), "base-model")
        try:  # close the client whatever happens
            await backend.load_lora_adapter("adapter-a", "/ckpt/adapter-a")
            assert await backend.list_models() == ["base-model", "adapter-a"]
            out = await backend.complete(
                [ChatRequest(MESSAGES, model="adapter-a"), ChatRequest(MESSAGES, model="nope")]
            )
            await backend.unload_lora_adapter("adapter-a")
            assert await backend.list_models() == ["base-model"]
            return out
        finally:
            await backend.aclose()

    adapter, unknown = asyncio.run(go())
    assert adapter.ok and adapter.model == "adapter-a"
    # the two requests are concurrent, so the server may see them in either order
    assert sorted(r["model"] for r in server.chat_requests) == ["adapter-a", "nope"]
    assert server.adapters == {}
    assert unknown.failure is not None
    assert unknown.failure.kind is InferenceFailureKind.CLIENT_ERROR
    assert unknown.failure.attempts == 1 and "does not exist" in unknown.failure.reason
    loads = [r.body for r in server.requests if r.path == "/v1/load_lora_adapter"]
    assert loads == [{"lora_name": "adapter-a", "lora_path": "/ckpt/adapter-a"}]


def test_adapter_administration_failures_raise_inference_error() -> None:
    async def go(url: str) -> None:
        backend = OpenAIBackend(make_config(url), "base-model")
        try:  # close the client whatever happens
            await backend.load_lora_adapter("a", "/p")
            with pytest.raises(InferenceError, match="already been loaded"):
                await backend.load_lora_adapter("a", "/p")
            with pytest.raises(InferenceError, match="cannot be found"):
                await backend.unload_lora_adapter("b")
        finally:
            await backend.aclose()

    async def refused(url: str) -> None:
        backend = OpenAIBackend(make_config(url), "base-model")
        try:  # close the client whatever happens
            with pytest.raises(InferenceError, match="404"):
                await backend.load_lora_adapter("a", "/p")
        finally:
            await backend.aclose()

    with FakeOpenAIServer() as srv:
        asyncio.run(go(srv.url))
    with FakeOpenAIServer(allow_runtime_lora=False) as srv:
        asyncio.run(refused(srv.url))


def test_health_and_model_list(server: FakeOpenAIServer) -> None:
    async def go(url: str) -> tuple[bool, list[str] | None]:
        backend = OpenAIBackend(make_config(url, request_timeout_s=0.5), "base-model")
        try:  # a dead server: health is False and the model list raises
            healthy = await backend.health()
            models = await backend.list_models() if healthy else None
            return healthy, models
        finally:
            await backend.aclose()

    assert asyncio.run(go(server.url)) == (True, ["base-model"])
    assert asyncio.run(go(f"http://127.0.0.1:{free_port()}/v1")) == (False, None)


# -- faults ----------------------------------------------------------------------------------


def failure_of(out: Completion) -> tuple[InferenceFailureKind, int]:
    assert out.failure is not None, out
    assert out.finish_reason == "error" and out.text == ""
    return out.failure.kind, out.failure.attempts


def test_dropped_connections_are_retried_until_the_server_recovers(
    server: FakeOpenAIServer,
) -> None:
    server.plan("drop", "drop", "ok")
    out = one(server.url)
    assert out.ok and out.text == "hi there" and len(server.chat_requests) == 3


def test_connections_that_always_drop_end_as_connection_failure(server: FakeOpenAIServer) -> None:
    server.plan(*["drop"] * 10)
    assert failure_of(one(server.url, max_retries=2)) == (InferenceFailureKind.CONNECTION, 3)


def test_refused_connection_is_a_connection_failure() -> None:
    out = one(f"http://127.0.0.1:{free_port()}/v1", max_retries=1)
    assert failure_of(out) == (InferenceFailureKind.CONNECTION, 2)


def test_server_errors_are_retried_then_succeed(
    server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.plan("500", "503", "ok")
    with caplog.at_level("WARNING", logger="spade.inference.retry"):
        assert one(server.url).ok and len(server.chat_requests) == 3
    retried = [r.getMessage() for r in caplog.records if r.name == "spade.inference.retry"]
    assert len(retried) == 2 and "attempt 1 failed" in retried[0] and "injected 500" in retried[0]
    assert "attempt 2 failed" in retried[1] and "injected 503" in retried[1]


def test_server_errors_exhaust_retries(server: FakeOpenAIServer) -> None:
    server.plan(*["500"] * 10)
    out = one(server.url, max_retries=3)
    assert failure_of(out) == (InferenceFailureKind.SERVER_ERROR, 4)
    assert out.failure is not None and "injected 500" in out.failure.reason


def test_retries_back_off_exponentially_up_to_the_cap(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spade.inference import openai as openai_mod

    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(openai_mod.asyncio, "sleep", recording_sleep)
    server.plan(*["500"] * 10)
    cfg: dict[str, Any] = {"max_retries": 5, "backoff_initial_s": 0.5, "backoff_max_s": 3.0}
    assert failure_of(one(server.url, **cfg)) == (InferenceFailureKind.SERVER_ERROR, 6)
    base = [0.5, 1.0, 2.0, 3.0, 3.0]  # doubling from backoff_initial_s, capped at backoff_max_s
    assert len(waits) == len(base)
    for waited, delay in zip(waits, base, strict=True):
        assert delay <= waited <= delay * 1.1  # plus up to 10 % jitter


def test_rate_limits_are_retried(server: FakeOpenAIServer) -> None:
    server.plan("429", "429", "ok")
    assert one(server.url).ok and len(server.chat_requests) == 3


def test_a_stalled_server_times_out_on_every_attempt(server: FakeOpenAIServer) -> None:
    """Each attempt is cut at request_timeout_s (the server would stall 30 s): a TIMEOUT
    after the retry, having waited at least the timeout each time."""
    server.plan(*["stall"] * 5)
    cfg: dict[str, Any] = {"request_timeout_s": 0.3, "max_retries": 1, "backoff_initial_s": 0.05}
    started = time.monotonic()
    out = one(server.url, **cfg)
    elapsed = time.monotonic() - started
    assert failure_of(out) == (InferenceFailureKind.TIMEOUT, 2)
    assert out.failure is not None and out.failure.reason == "no answer within 0.3s"
    assert len(server.chat_requests) == 2 and elapsed >= 2 * 0.3


def test_malformed_json_is_a_bad_response_retried_once(server: FakeOpenAIServer) -> None:
    server.plan("malformed", "malformed", "malformed", "ok")
    assert failure_of(one(server.url, max_retries=4)) == (InferenceFailureKind.BAD_RESPONSE, 2)
    assert len(server.chat_requests) == 2
    assert one(server.url).ok  # the third answer is malformed, the fourth fine
    assert len(server.chat_requests) == 4


def test_json_without_a_choice_is_a_bad_response(server: FakeOpenAIServer) -> None:
    server.plan("nochoices", "nochoices")
    out = one(server.url)
    assert failure_of(out) == (InferenceFailureKind.BAD_RESPONSE, 2)
    assert out.failure is not None and "choices" in out.failure.reason


def test_a_request_that_cannot_be_encoded_is_a_client_error_and_never_sent(
    server: FakeOpenAIServer,
) -> None:
    out = one(server.url, ChatRequest([{"role": "user", "content": object()}]))
    assert failure_of(out) == (InferenceFailureKind.CLIENT_ERROR, 0)
    assert server.chat_requests == []


def test_context_length_error_is_not_retried() -> None:
    with FakeOpenAIServer("base-model", script=echo, max_context=100) as srv:
        out = one(srv.url, ChatRequest([{"role": "user", "content": "x" * 200}]))
        assert failure_of(out) == (InferenceFailureKind.CONTEXT_LENGTH, 1)
        assert len(srv.chat_requests) == 1


def test_other_client_errors_are_not_retried(server: FakeOpenAIServer) -> None:
    server.plan("422")
    assert failure_of(one(server.url)) == (InferenceFailureKind.CLIENT_ERROR, 1)
    assert len(server.chat_requests) == 1


def test_concurrency_limit_is_respected() -> None:
    with FakeOpenAIServer("base-model", script=echo, latency_s=0.05) as srv:
        requests = [ChatRequest([{"role": "user", "content": f"q{i}"}]) for i in range(20)]
        out = complete(srv.url, requests, max_concurrency=3)
        assert [c.text for c in out] == [f"q{i}" for i in range(20)]
        assert 1 < srv.max_in_flight <= 3
