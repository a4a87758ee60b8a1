"""A scripted OpenAI-compatible stand-in for ``vllm serve``, on loopback, standard library only.

It stands at a true boundary (an HTTP server in another process in production), so tests can
drive the real client code against it. It serves ``/v1/chat/completions``, ``/v1/models``,
``/health``, ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` in vLLM's shapes:

- answers come from a script ``(request_json) -> text`` or a queue of texts (else ``"ok"``);
- fake tokenization: one token per character, id ``ord(char)``; the prompt is the messages
  rendered as ``<role>content\\n``; each sampled token has log-prob ``-(id % 10 + 1) / 10``;
- ``logprobs``, ``return_token_ids`` and ``return_tokens_as_token_ids`` behave like vLLM's; like
  an older vLLM (or another server) it can ignore the last two (``return_token_ids_supported``,
  ``tokens_as_ids_supported``: no ids, log-prob tokens as text);
  ``max_tokens`` truncates (finish_reason ``"length"``), ``stop`` strings cut the text;
- a request naming a model that is neither the base model nor a loaded adapter gets 404;
- with ``check_lora_paths`` (``--check-lora-paths``), ``lora_path`` must be a folder on this
  machine holding ``adapter_config.json`` and ``adapter_model.safetensors`` (or ``.bin``), as
  vLLM reads it, else the load gets vLLM's 400;
- fault injection for chat requests, one plan entry per request: ``"drop"`` (close the socket
  without an answer), ``"stall"`` (answer nothing until stopped, at most ``stall_s``),
  ``"malformed"`` (200 with invalid JSON), ``"nochoices"`` (200 with JSON lacking a choice),
  ``"context"`` (vLLM's 400 for a too-long prompt),
  any status code such as ``"500"`` or ``"429"``, ``"ok"``; an empty plan means ``"ok"``.

Every request is recorded (:attr:`FakeOpenAIServer.requests`), and so is the largest number of
chat requests in flight at once. Run as a script it stands in for ``vllm serve``::

    python -m spade.testing.openai_server --host 127.0.0.1 --port 8000 --model M [--script echo]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Script = Callable[[dict[str, Any]], str]


def echo(request: dict[str, Any]) -> str:
    """Answer with the last user message."""
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    return str(users[-1].get("content", "")) if users else ""


def model_name(request: dict[str, Any]) -> str:
    """Answer with the model the request named (shows which weights or adapter served it)."""
    return str(request.get("model", ""))


SCRIPTS: dict[str, Script] = {"echo": echo, "model": model_name}


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    body: Any  # parsed JSON, or None
    headers: dict[str, str] = field(default_factory=dict)


def tokenize(text: str) -> list[int]:
    return [ord(ch) for ch in text]


def token_logprob(token_id: int) -> float:
    return -((token_id % 10) + 1) / 10


def render_prompt(messages: list[dict[str, Any]]) -> str:
    return "".join(f"<{m.get('role', '')}>{m.get('content') or ''}\n" for m in messages)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # stalled handlers must not keep the test process alive
    fake: FakeOpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up on a stall or drop are expected here; stay quiet


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.fake._handle(self, "GET")

    def do_POST(self) -> None:
        self.server.fake._handle(self, "POST")


class FakeOpenAIServer:
    """An OpenAI-compatible stand-in on ``host:port`` (port 0: any free port)."""

    def __init__(
        self,
        model: str = "fake-model",
        *,
        script: Script | None = None,
        texts: Iterable[str] = (),
        faults: Iterable[str] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        latency_s: float = 0.0,
        stall_s: float = 30.0,
        max_context: int | None = None,
        allow_runtime_lora: bool = True,
        return_token_ids_supported: bool = True,
        tokens_as_ids_supported: bool = True,
        check_lora_paths: bool = False,
    ) -> None:
        self.model = model
        self.check_lora_paths = check_lora_paths
        self.script = script
        self.latency_s = latency_s
        self.stall_s = stall_s
        self.max_context = max_context
        self.allow_runtime_lora = allow_runtime_lora
        self.return_token_ids_supported = return_token_ids_supported
        self.tokens_as_ids_supported = tokens_as_ids_supported
        self.requests: list[Recorded] = []
        self.adapters: dict[str, str] = {}
        self.max_in_flight = 0
        self._texts: deque[str] = deque(texts)
        self._faults: deque[str] = deque(faults)
        self._in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.fake = self
        self._thread: threading.Thread | None = None

    # -- life cycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def root(self) -> str:
        host = self._httpd.server_address[0]
        return f"http://{host!s}:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI base URL (``.../v1``)."""
        return f"{self.root}/v1"

    def overrides(self) -> dict[str, object]:
        """Config overrides that point the campaign's inference at this server."""
        return {
            "inference.backend": "openai",
            "inference.base_url": self.url,
            "inference.served_model": self.model,
        }

    def start(self) -> FakeOpenAIServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # releases stalled handlers
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting ------------------------------------------------------------------------------

    def plan(self, *faults: str) -> None:
        """Queue what the next chat requests get (``"ok"``, ``"drop"``, ``"500"``, ...)."""
        with self._lock:
            self._faults.extend(faults)

    def say(self, *texts: str) -> None:
        """Queue answer texts (used when there is no script)."""
        with self._lock:
            self._texts.extend(texts)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.body for r in self.requests if r.path == "/v1/chat/completions"]

    @property
    def served_models(self) -> list[str]:
        with self._lock:
            return [self.model, *self.adapters]

    # -- request handling -----------------------------------------------------------------------

    def _handle(self, h: _Handler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:  # a body that is not JSON is recorded as None and answered with 400 below
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(Recorded(method, h.path, body, dict(h.headers.items())))
        route = {
            ("GET", "/health"): self._health,
            ("GET", "/v1/models"): self._models,
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/load_lora_adapter"): self._load_adapter,
            ("POST", "/v1/unload_lora_adapter"): self._unload_adapter,
        }.get((method, h.path.split("?")[0]))
        if route is None:
            _error(h, 404, f"no route {method} {h.path}", "NotFoundError")
        elif method == "POST" and not isinstance(body, dict):
            _error(h, 400, "body must be a JSON object")
        else:
            route(h, body)

    def _health(self, h: _Handler, body: Any) -> None:
        _send(h, 200, b"")

    def _models(self, h: _Handler, body: Any) -> None:
        with self._lock:
            entries = [{"id": self.model, "object": "model", "root": self.model, "parent": None}]
            entries += [
                {"id": n, "object": "model", "root": p, "parent": self.model}
                for n, p in self.adapters.items()
            ]
        _send_json(h, 200, {"object": "list", "data": entries})

    def _load_adapter(self, h: _Handler, body: dict[str, Any]) -> None:
        if not self.allow_runtime_lora:
            _error(h, 404, "Not Found", "NotFoundError")
            return
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not isinstance(path, str):
            _error(h, 400, "lora_name and lora_path are required")
            return
        if self.check_lora_paths and not _adapter_folder(path):
            _error(h, 400, f"Loading lora {name} failed: No adapter found for {path}")
            return
        with self._lock:
            known = name in self.adapters
            if not known:
                self.adapters[name] = path
        if known:
            _error(h, 400, f"The lora adapter '{name}' has already been loaded.")
        else:
            _send(h, 200, f"Success: LoRA adapter '{name}' added successfully.".encode())

    def _unload_adapter(self, h: _Handler, body: dict[str, Any]) -> None:
        if not self.allow_runtime_lora:
            _error(h, 404, "Not Found", "NotFoundError")
            return
        name = body.get("lora_name")
        with self._lock:
            removed = self.adapters.pop(str(name), None)
        if removed is None:
            _error(h, 404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
        else:
            _send(h, 200, f"Success: LoRA adapter '{name}' removed successfully.".encode())

    def _chat(self, h: _Handler, body: dict[str, Any]) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            fault = self._faults.popleft() if self._faults else "ok"
        try:  # the in-flight count must drop however the request ends
            self._chat_with_fault(h, body, fault)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _chat_with_fault(self, h: _Handler, body: dict[str, Any], fault: str) -> None:
        if fault == "drop":
            _hang_up(h)
        elif fault == "stall":
            self._stop.wait(self.stall_s)
            _hang_up(h)
        elif fault == "malformed":
            _send(h, 200, b'{"choices": [{"message": ', "application/json")
        elif fault == "nochoices":
            _send_json(h, 200, {"object": "chat.completion", "choices": []})
        elif fault == "context":
            _error(h, 400, _context_message(10**6, self.max_context or 4096))
        elif fault.isdigit():
            kind = "InternalServerError" if int(fault) >= 500 else "BadRequestError"
            _error(h, int(fault), f"injected {fault}", kind)
        else:
            self._answer(h, body)

    def _answer(self, h: _Handler, body: dict[str, Any]) -> None:
        requested = body.get("model")
        if requested not in self.served_models:
            _error(h, 404, f"The model `{requested}` does not exist.", "NotFoundError")
            return
        prompt_ids = tokenize(render_prompt(body.get("messages") or []))
        max_tokens = int(body.get("max_tokens") or 16)
        if self.max_context is not None and len(prompt_ids) + max_tokens > self.max_context:
            _error(h, 400, _context_message(len(prompt_ids) + max_tokens, self.max_context))
            return
        if self.latency_s:
            self._stop.wait(self.latency_s)
        text, finish = _truncate(self._next_text(body), body.get("stop") or [], max_tokens)
        _send_json(h, 200, self._completion(body, text, finish, prompt_ids))

    def _next_text(self, body: dict[str, Any]) -> str:
        if self.script is not None:
            return self.script(body)
        with self._lock:
            return self._texts.popleft() if self._texts else "ok"

    def _completion(
        self, body: dict[str, Any], text: str, finish: str, prompt_ids: list[int]
    ) -> dict[str, Any]:
        ids = tokenize(text)
        with_ids = bool(body.get("return_token_ids")) and self.return_token_ids_supported
        as_ids = bool(body.get("return_tokens_as_token_ids")) and self.tokens_as_ids_supported
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": _logprobs(text, as_ids) if body.get("logprobs") else None,
            "finish_reason": finish,
            "stop_reason": None,
            "token_ids": ids if with_ids else None,
        }
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt_ids) + len(ids),
            },
            "prompt_token_ids": prompt_ids if with_ids else None,
        }


def _adapter_folder(path: str) -> bool:
    folder = os.path.join(path, "")
    weights = ("adapter_model.safetensors", "adapter_model.bin")
    return os.path.isfile(folder + "adapter_config.json") and any(
        os.path.isfile(folder + w) for w in weights
    )


def _truncate(text: str, stop: str | list[str], max_tokens: int) -> tuple[str, str]:
    for s in [stop] if isinstance(stop, str) else stop:
        if s and s in text:
            text = text[: text.index(s)]
    if len(text) > max_tokens:
        return text[:max_tokens], "length"
    return text, "stop"


def _logprobs(text: str, as_ids: bool) -> dict[str, Any]:
    content = [
        {
            "token": f"token_id:{ord(ch)}" if as_ids else ch,
            "logprob": token_logprob(ord(ch)),
            "bytes": list(ch.encode()),
            "top_logprobs": [],
        }
        for ch in text
    ]
    return {"content": content}


def _context_message(requested: int, limit: int) -> str:
    return (
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{requested} tokens. Please reduce the length of the messages or completion."
    )


def _send(h: _Handler, status: int, data: bytes, content_type: str = "text/plain") -> None:
    h.send_response(status)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def _send_json(h: _Handler, status: int, obj: Any) -> None:
    _send(h, status, json.dumps(obj).encode(), "application/json")


def _error(h: _Handler, status: int, message: str, kind: str = "BadRequestError") -> None:
    error = {"message": message, "type": kind, "param": None, "code": status}
    _send_json(h, status, {"error": error})


def _hang_up(h: _Handler) -> None:
    h.close_connection = True
    with contextlib.suppress(OSError):  # the client may already have gone
        h.connection.shutdown(socket.SHUT_RDWR)


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM/SIGINT, like ``vllm serve`` (unknown vLLM flags are ignored)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--script", choices=sorted(SCRIPTS), default="echo")
    parser.add_argument("--check-lora-paths", action="store_true")
    args, _ = parser.parse_known_args(argv)
    allow = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "").lower() in ("true", "1")
    server = FakeOpenAIServer(
        args.model,
        script=SCRIPTS[args.script],
        host=args.host,
        port=args.port,
        allow_runtime_lora=allow,
        check_lora_paths=args.check_lora_paths,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with server:
        print(f"INFO: serving {args.model} on {server.root}", flush=True)
        while not stop.wait(0.2):
            pass
    print("INFO: shut down", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
