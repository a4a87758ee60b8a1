"""A llama.cpp server (``xllamacpp``) in a process of its own, launched and supervised from here.

``xllamacpp.Server`` runs llama.cpp's HTTP server inside the calling Python process. We never
call it in the orchestrator's process: its C++ threads would share the Prefect worker, a crash
would take the worker down, and new weights mean a new server. So it runs in a child process,
``python -m spade.inference.llamacpp_server`` (:func:`main`), which builds the server's
``CommonParams`` from its arguments, starts it, writes the address it listens on to
``--address-file`` (port 0 lets the server pick a free port, with no race against other
processes) and serves until SIGTERM. It also ends when its parent dies (a watchdog thread), so a
killed worker leaves no server eating the CPU.

:class:`LlamaCppServer` owns that child: :meth:`~LlamaCppServer.start` launches it (output in a
log file) and blocks until the address is written and ``GET /health`` answers 200 within
``startup_timeout_s``; an early exit or a timeout is :class:`~spade.errors.InferenceError` with
the log's tail. :meth:`~LlamaCppServer.stop` sends SIGTERM, then SIGKILL after
``shutdown_timeout_s``; :meth:`~LlamaCppServer.restart` starts it again with another list of
LoRA adapters (GGUF files, applied at scale 1 to every request).

Context: ``context_tokens`` is each slot's, so the server is given ``parallel x context_tokens``
(llama.cpp splits ``n_ctx`` across its slots).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import httpx

from spade.config import LlamaCppServerConfig
from spade.errors import InferenceError
from spade.inference.managed import ManagedServer, healthy, temp_path

_PARENT_POLL_S = 1.0


class LlamaCppServer(ManagedServer):
    """One managed llama.cpp server process serving the GGUF file ``model`` (plus adapters)."""

    def __init__(
        self,
        config: LlamaCppServerConfig,
        model: str | Path,
        *,
        context_tokens: int,
        log_path: str | Path | None = None,
    ) -> None:
        self.config = config
        self.model = Path(model)
        self.context_tokens = context_tokens
        self.adapters: tuple[Path, ...] = ()
        self.log_path = Path(log_path) if log_path else temp_path("spade-llamacpp-", ".log")
        self._process: subprocess.Popen[bytes] | None = None
        self._root_url: str | None = None

    @property
    def root_url(self) -> str:
        """``http://host:port`` of the running server (known once it has started)."""
        if self._root_url is None:
            raise InferenceError("the llama.cpp server has not been started")
        return self._root_url

    def command(self, address_file: Path) -> list[str]:
        cfg = self.config
        threads = cfg.threads or os.cpu_count() or 1
        cmd = [sys.executable, "-m", "spade.inference.llamacpp_server", "--model", str(self.model)]
        cmd += ["--context-tokens", str(self.context_tokens), "--parallel", str(cfg.parallel)]
        cmd += ["--threads", str(threads), "--host", cfg.host, "--port", str(cfg.port)]
        for adapter in self.adapters:
            cmd += ["--lora", str(adapter)]
        return [*cmd, "--address-file", str(address_file)]

    # -- life cycle -------------------------------------------------------------------------

    def start(self, adapters: Sequence[str | Path] | None = None) -> None:
        """Launch (with ``adapters``, else the current ones) and block until healthy."""
        if self.running:
            raise InferenceError(f"llama.cpp server already running (pid {self.pid})")
        if adapters is not None:
            self.adapters = tuple(Path(a) for a in adapters)
        address_file = temp_path("spade-llamacpp-", ".addr")
        address_file.unlink()  # the child writes it (atomically) once it listens
        try:  # the address file is temporary whatever happens
            self._popen(self.command(address_file))
            self._wait_healthy(address_file)
        finally:
            address_file.unlink(missing_ok=True)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after the grace period; idempotent."""
        process, self._process, self._root_url = self._process, None, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:  # a server that ignores SIGTERM past the grace period is killed
                process.wait(timeout=self.config.shutdown_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def restart(self, adapters: Sequence[str | Path] | None = None) -> None:
        """Stop, then start with ``adapters`` (None: the same ones)."""
        self.stop()
        self.start(adapters)

    # -- internals ----------------------------------------------------------------------------

    def _wait_healthy(self, address_file: Path) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        pause = 0.05
        with httpx.Client(timeout=2.0, trust_env=False) as client:  # local: no proxy
            while time.monotonic() < deadline:
                if self._process is None or self._process.poll() is not None:
                    code = self._process.returncode if self._process is not None else None
                    self._fail(f"exited with code {code} during start-up")
                if self._root_url is None and address_file.is_file():
                    self._root_url = address_file.read_text().strip()
                if self._root_url is not None and healthy(client, f"{self._root_url}/health"):
                    return
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 1.0)
        self._fail(f"not healthy within {self.config.startup_timeout_s}s")

    def _fail(self, what: str) -> NoReturn:
        self.stop()
        raise InferenceError(
            f"llama.cpp server for {self.model} {what}; log {self.log_path}, last lines:\n"
            f"{self.log_tail()}"
        )


# -- the server process ------------------------------------------------------------------------


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Serve a GGUF model with llama.cpp until SIGTERM.")
    ap.add_argument("--model", required=True, help="the GGUF file")
    ap.add_argument("--context-tokens", type=int, required=True, help="context of each slot")
    ap.add_argument("--parallel", type=int, required=True, help="slots")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--lora", action="append", default=[], help="a GGUF LoRA adapter (repeat)")
    ap.add_argument("--address-file", required=True, help="where to write the served URL")
    return ap.parse_args(argv)


def server_params(args: argparse.Namespace) -> Any:
    """``xllamacpp.CommonParams`` for the arguments of :func:`main`."""
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = args.model
    p.n_parallel = args.parallel
    p.n_ctx = args.context_tokens * args.parallel  # split across the slots
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.hostnames = [args.host]
    p.port = args.port
    p.warmup = False  # a warm-up run costs start-up time and changes nothing we measure
    p.use_jinja = True
    adapters = []
    for path in args.lora:
        adapter = xllamacpp.CommonAdapterLoraInfo()
        adapter.path = path
        adapter.scale = 1.0
        adapters.append(adapter)
    p.lora_adapters = adapters
    return p


def _exit_with_parent(parent: int) -> None:
    """SIGTERM ourselves once ``parent`` is gone (we were re-parented)."""
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until SIGTERM; the listening URL goes to ``--address-file`` once it serves."""
    args = _arguments(argv)
    import xllamacpp

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # unwinds: the server stops cleanly
    threading.Thread(
        target=_exit_with_parent, args=(os.getppid(),), name="parent-watch", daemon=True
    ).start()
    server = xllamacpp.Server(server_params(args))  # loads the model; serves from its threads
    address = str(server.listening_address)
    target = Path(args.address_file)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(address)
    tmp.rename(target)  # atomic: the parent never reads half an address
    print(json.dumps({"listening": address}), flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            signal.pause()


if __name__ == "__main__":
    main()
