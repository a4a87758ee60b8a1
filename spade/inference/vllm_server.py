"""A ``vllm serve`` process this program launches, watches and stops (docs/architecture.md §4).

vLLM cannot share Prefect's environment, so it always runs as a separate process started from
its own environment: the ``vllm`` executable of another virtual environment
(``VllmServerConfig.executable``) or a container image (``VllmServerConfig.container``, see
:class:`spade.config.VllmContainerConfig`: local weights are mounted read-only at the same paths,
so the paths handed to the server need no translation). :class:`VllmServer` owns that process:
it starts it in its own process group (vLLM forks engine workers) with its output in a log file,
waits for ``GET /health`` to answer 200, and stops the whole group (SIGTERM, then SIGKILL after
``shutdown_timeout_s``; a container is then removed by name). The group does not outlive this
process (:func:`spade.processes.guard_group`): a watcher stops it the same way once this process
is gone (a ``kill -9``, an OOM kill), and :meth:`VllmServer.start` first stops any server a dead
process of this machine left (:func:`spade.processes.stop_orphaned_groups`), so a resumed
campaign finds its port free. A new full checkpoint is picked up by :meth:`VllmServer.restart`;
a new LoRA adapter needs no restart (runtime loading is enabled with
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and done through
:meth:`spade.inference.openai.OpenAIBackend.swap_lora_adapter`).

Weights versions. A checkpoint published with a version is served under that version's name
(``--served-model-name``, replacing a configured one), and an adapter under its own versioned
name, so requests - and the rollouts recording ``Completion.model`` - say which weights served
them. vLLM reads weights and adapters from its own filesystem: copies of checkpoints on a remote
store are staged under :func:`staging_root` first (see :mod:`spade.inference.pool`).

:class:`ManagedVllmBackend` is that server plus an :class:`OpenAIBackend` speaking to it (with
the model's tokenizer, for the token ids a vLLM older than ``return_token_ids`` does not return:
:mod:`spade.inference.retokenize`). ``scripts/vllm_venv.sh`` builds vLLM's CPU wheel in a
virtualenv of its own and prints the executable to configure; on CPU, size the KV cache with
``--kv-cache-memory-bytes`` in ``extra_args`` (the default reserves 92% of RAM).
Launch failures (the process exits, or is not healthy in time) raise
:class:`spade.errors.InferenceError` with the tail of the server's log.

Placement and sampling. The server runs on the GPUs it is given (``devices``: node indices
from :func:`spade.placement.placement`, as the factory passes them): the process gets
``CUDA_VISIBLE_DEVICES`` naming them, a container ``--gpus '"device=..."'`` (Docker's form for
a list of GPUs); with none (a CPU model) the environment is left as it is. The parallelism is
``inference.vllm``'s (``--tensor-parallel-size``, ``--data-parallel-size``, written when above
1), and ``--generation-config vllm`` (the default of ``generation_config``) keeps the model's
generation_config.json out of the default sampling parameters, so what is sampled is
softmax(logits / temperature), what the trainer scores.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, Self

import httpx

from spade.config import InferenceConfig, VllmServerConfig
from spade.errors import InferenceError
from spade.inference.base import ChatRequest, Completion
from spade.inference.managed import ManagedServer, healthy, temp_path
from spade.inference.openai import OpenAIBackend
from spade.placement import cuda_visible_devices
from spade.processes import GroupGuard, group_alive, guard_group, stop_orphaned_groups

_SERVED_NAME = "--served-model-name"
_LOGPROBS_MODE = "--logprobs-mode"


def staging_root() -> Path:
    """``$SPADE_CACHE/published`` (default ``~/.cache/spade/published``): local copies of the
    checkpoints and adapters a managed server loads (mounted into a container)."""
    return Path(os.environ.get("SPADE_CACHE") or "~/.cache/spade").expanduser() / "published"


class VllmServer(ManagedServer):
    """One managed ``vllm serve MODEL`` process; ``model`` is a hub id or a checkpoint folder.

    ``served_name``: serve the model under this name (``--served-model-name``, replacing any in
    ``extra_args``); None: as configured, else vLLM names it after ``model``. ``devices``: the
    node's GPU indices the server uses (:func:`spade.placement.placement`'s ``serve``); empty:
    none chosen here (a CPU model), the environment's GPUs, if any, stay visible.
    """

    def __init__(
        self,
        config: VllmServerConfig,
        model: str,
        *,
        devices: Sequence[int] = (),
        log_path: str | Path | None = None,
        served_name: str | None = None,
    ) -> None:
        self.config = config
        self.model = model
        self.devices = tuple(devices)
        self.served_name = served_name
        self.log_path = Path(log_path) if log_path else temp_path("spade-vllm-", ".log")
        self._process: subprocess.Popen[bytes] | None = None
        self._guard: GroupGuard | None = None
        self.container_name = f"spade-vllm-{config.port}-{os.getpid()}"

    @property
    def connect_host(self) -> str:
        """Where clients on this machine reach the server (a wildcard bind means loopback)."""
        return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(
            self.config.host, self.config.host
        )

    @property
    def root_url(self) -> str:
        host = self.connect_host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.config.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL clients use (``.../v1``)."""
        return f"{self.root_url}/v1"

    @property
    def model_arg(self) -> str:
        """The model as ``vllm serve`` gets it: in a container, a local path made absolute (it is
        mounted at that path)."""
        local = Path(self.model).expanduser()
        if self.config.container is not None and local.exists():
            return str(local.resolve())
        return self.model

    def serve_args(self) -> list[str]:
        """``serve MODEL --host H --port P [--tensor-parallel-size T] [--data-parallel-size D]
        --generation-config G [--logprobs-mode processed_logprobs] [LoRA flags] [extra args]
        [--served-model-name N]``."""
        cfg = self.config
        host = "0.0.0.0" if cfg.container is not None else cfg.host  # published on cfg.host
        cmd = ["serve", self.model_arg, "--host", host, "--port", str(cfg.port)]
        if cfg.tensor_parallel_size > 1:  # 1 is vLLM's default: the flag would say nothing
            cmd += ["--tensor-parallel-size", str(cfg.tensor_parallel_size)]
        if cfg.data_parallel_size > 1:
            cmd += ["--data-parallel-size", str(cfg.data_parallel_size)]
        cmd += ["--generation-config", cfg.generation_config]
        if not any(a.split("=", 1)[0] == _LOGPROBS_MODE for a in cfg.extra_args):
            # the sampled tokens' log-probs under the distribution sampled from (temperature
            # applied), as the trainer computes them at the role's temperature; vLLM's default
            # is the raw model's. A configured --logprobs-mode is the user's to keep.
            cmd += [_LOGPROBS_MODE, "processed_logprobs"]
        if cfg.enable_lora:
            cmd += ["--enable-lora", "--max-lora-rank", str(cfg.max_lora_rank)]
        if self.served_name is None:
            return cmd + list(cfg.extra_args)
        return cmd + _without_flag(cfg.extra_args, _SERVED_NAME) + [_SERVED_NAME, self.served_name]

    def mounts(self) -> list[Path]:
        """Host folders a container needs: the model (if local) and, with LoRA, the staging root
        adapters are loaded from at runtime."""
        local = Path(self.model).expanduser()
        paths = [local.resolve()] if local.exists() else []
        if self.config.enable_lora:
            paths.append(staging_root().resolve())
        return paths

    def command(self) -> list[str]:
        cfg, box = self.config, self.config.container
        if box is None:
            return [cfg.executable, *self.serve_args()]
        host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
        publish = f"{host}:{cfg.port}:{cfg.port}" if host else f"{cfg.port}:{cfg.port}"
        cmd = [box.runtime, "run", "--rm", "--name", self.container_name, "-p", publish]
        if box.gpus and self.devices:  # the quotes keep Docker's CSV parser from splitting it
            cmd += ["--gpus", f'"device={self.cuda_visible_devices()}"']
        elif box.gpus:
            cmd += ["--gpus", box.gpus]
        if cfg.enable_lora:
            cmd += ["-e", "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"]
        for path in self.mounts():
            cmd += ["-v", f"{path}:{path}:ro"]
        return [*cmd, *box.extra_args, "--entrypoint", "vllm", box.image, *self.serve_args()]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.config.enable_lora:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        if self.devices and self.config.container is None:  # a container gets them by --gpus
            env["CUDA_VISIBLE_DEVICES"] = self.cuda_visible_devices()
        return env

    def cuda_visible_devices(self) -> str:
        """``devices`` as the server's ``CUDA_VISIBLE_DEVICES``
        (:func:`spade.placement.cuda_visible_devices`: mapped through this process's own
        ``CUDA_VISIBLE_DEVICES`` when it has one).

        Raises:
            ConfigError: an index past the GPUs this process sees.
        """
        return cuda_visible_devices(
            self.devices,
            what="the vLLM server's GPUs",
            fields="inference.vllm.devices, or its first tensor_parallel_size x data_parallel_size",
        )

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Launch and block until ``/health`` is 200; InferenceError (with log tail) if not."""
        if self.running:
            raise InferenceError(f"vLLM server already running (pid {self.pid})")
        stop_orphaned_groups()  # a killed campaign's server would hold the port (and GPUs)
        self._ensure_port_free()
        self._launch()
        self._wait_healthy()

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL what is left after the grace period; idempotent."""
        process, self._process = self._process, None
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.config.shutdown_timeout_s
        # a server that ignores SIGTERM past the grace period is killed by _reap_group
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=self.config.shutdown_timeout_s)
        _reap_group(process, deadline)
        if self.config.container is not None:
            self._remove_container()
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.close()

    def _remove_container(self) -> None:
        """A killed ``docker run`` leaves its container running: remove it by name (it is gone
        already after a clean stop; ``rm -f`` also waits for ``--rm``, freeing the name)."""
        cmd = self._container_removal()
        try:  # best effort: a runtime that cannot be run has no container left to remove
            subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=self.config.shutdown_timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            with self.log_path.open("a") as log:
                log.write(f"=== spade: {' '.join(cmd)} failed: {exc}\n")

    def _container_removal(self) -> list[str]:
        box = self.config.container
        return [] if box is None else [box.runtime, "rm", "-f", self.container_name]

    def restart(self, model: str | None = None) -> None:
        """Stop, then start serving ``model`` (a new checkpoint folder) or the same weights."""
        self.stop()
        if model is not None:
            self.model = model
        self.start()

    # -- internals ----------------------------------------------------------------------------

    def _ensure_port_free(self) -> None:
        """Another server on our port would answer /health for us: refuse to start."""
        try:  # a refused connection is the good case
            with socket.create_connection((self.connect_host, self.config.port), timeout=1.0):
                pass
        except OSError:
            return
        raise InferenceError(f"port {self.config.port} on {self.connect_host} is already in use")

    def _launch(self) -> None:
        if self.config.container is not None and self.config.enable_lora:
            staging_root().mkdir(parents=True, exist_ok=True)  # mounted: must exist, ours
        self._popen(self.command(), self.environment())
        assert self._process is not None
        self._guard = guard_group(
            self._process,
            what=f"vLLM server on port {self.config.port} ({self.model})",
            grace=self.config.shutdown_timeout_s,
            cleanup=self._container_removal(),
            log_path=self.log_path,
        )

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        pause = 0.05
        with httpx.Client(timeout=2.0, trust_env=False) as client:  # local: no proxy
            while time.monotonic() < deadline:
                if self._process is None or self._process.poll() is not None:
                    self._fail(f"exited with code {self._exit_code()} during start-up")
                if healthy(client, f"{self.root_url}/health"):
                    return
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 2.0)
        self._fail(f"not healthy within {self.config.startup_timeout_s}s")

    def _exit_code(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    def _fail(self, what: str) -> NoReturn:
        self.stop()
        raise InferenceError(
            f"vLLM server ({' '.join(self.command())}) {what}; log {self.log_path}, last lines:\n"
            f"{self.log_tail()}"
        )


class ManagedVllmBackend:
    """A :class:`VllmServer` and the :class:`OpenAIBackend` that talks to it, as one Backend.

    ``start()`` launches the server (blocking); ``publish_checkpoint(path, version)`` restarts it
    on new full weights served under ``version`` and points requests at them;
    ``publish_adapter(name, path)`` loads a LoRA adapter, points requests at it and unloads the
    one it replaces (:attr:`adapter`). ``aclose()`` closes the client and stops the server.
    """

    def __init__(
        self,
        config: InferenceConfig,
        model: str,
        *,
        devices: Sequence[int] = (),
        log_path: str | Path | None = None,
    ) -> None:
        """``devices``: the server's GPUs (see :class:`VllmServer`)."""
        self.base_model = model
        self.server = VllmServer(config.vllm, model, devices=devices, log_path=log_path)
        self._client_config = config.model_copy(update={"base_url": self.server.base_url})
        # the model's own tokenizer re-derives token ids an older vLLM does not return
        self.client = OpenAIBackend(self._client_config, self.server_model_name, tokenizer=model)
        self.adapter: str | None = None  # the runtime-loaded adapter requests go to

    @property
    def server_model_name(self) -> str:
        """What vLLM calls the model: the version's name, ``--served-model-name`` if configured,
        else the model path."""
        if self.server.served_name is not None:
            return self.server.served_name
        configured = configured_served_name(self.server.config.extra_args)
        return configured if configured is not None else self.server.model_arg

    def start(self) -> Self:
        self.server.start()
        return self

    def serve_checkpoint(self, path: str | Path, version: str | None = None) -> None:
        """Restart vLLM on a full checkpoint folder (or the base model), served under
        ``version`` (None: the configured name); blocking, it takes minutes."""
        self.server.served_name = version
        self.server.restart(str(path))
        self.adapter = None  # a restarted server holds no runtime adapters
        self.client.model_name = self.server_model_name

    async def publish_checkpoint(self, path: str | Path, version: str | None = None) -> None:
        """:meth:`serve_checkpoint` in a thread."""
        await asyncio.to_thread(self.serve_checkpoint, path, version)

    async def publish_adapter(self, name: str, path: str | Path) -> None:
        """Load the adapter folder ``path`` (readable by the server) under ``name``, send later
        requests to it and unload the adapter it replaces (a failed unload is only logged)."""
        admin = OpenAIBackend(self._client_config, self.model_name)  # bound to this event loop
        try:  # the admin client is closed whatever the server answers
            await admin.swap_lora_adapter(name, str(path), previous=self.adapter)
        finally:
            await admin.aclose()
        self.adapter = name
        self.client.model_name = name

    @property
    def model_name(self) -> str:
        return self.client.model_name

    async def complete(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        return await self.client.complete(requests)

    def count_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> int | None:
        return None

    async def aclose(self) -> None:
        await self.client.aclose()
        await asyncio.to_thread(self.server.stop)


def configured_served_name(args: Sequence[str]) -> str | None:
    """The name ``--served-model-name NAME`` (or ``=NAME``) in ``args`` gives; None if absent."""
    if _SERVED_NAME in args[:-1]:
        return args[list(args).index(_SERVED_NAME) + 1]
    joined = [a.split("=", 1)[1] for a in args if a.startswith(f"{_SERVED_NAME}=")]
    return joined[0] if joined else None


def _without_flag(args: Sequence[str], flag: str) -> list[str]:
    """``args`` less ``flag VALUE`` and ``flag=VALUE``."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(f"{flag}="):
            out.append(arg)
    return out


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False if it no longer exists."""
    try:  # the group is gone once its last member has exited
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _reap_group(process: subprocess.Popen[bytes], deadline: float) -> None:
    """Wait for the group's other members until ``deadline``, then SIGKILL them all."""
    while time.monotonic() < deadline and group_alive(process.pid):
        time.sleep(0.05)
    _signal_group(process.pid, signal.SIGKILL)
    process.wait()
