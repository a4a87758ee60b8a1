"""VllmServer and ManagedVllmBackend with a stand-in ``vllm`` executable (no GPU, no vLLM).

The stand-in is a small script named ``vllm`` that parses ``serve MODEL --host H --port P ...``,
leaves a child process behind in its group (as vLLM's engine workers do) and execs the scripted
OpenAI-compatible server of :mod:`tests.fakes.openai_server`, which answers with the name of the
model each request named.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import sys
import time
from pathlib import Path

import pytest

from spade.config import InferenceConfig, VllmServerConfig
from spade.errors import InferenceError
from spade.inference.base import Backend, ChatRequest
from spade.inference.vllm_server import ManagedVllmBackend, VllmServer, group_alive

REPO = Path(__file__).resolve().parents[2]

SERVING_STUB = """
import argparse, json, os, subprocess, sys
parser = argparse.ArgumentParser()
parser.add_argument("command")
parser.add_argument("model")
parser.add_argument("--host")
parser.add_argument("--port")
args, rest = parser.parse_known_args()
worker = subprocess.Popen(["sleep", "300"])  # stays in the group, like vLLM's engine core
with open(os.environ["STUB_RECORD"], "a") as f:
    record = {"argv": sys.argv[1:], "worker": worker.pid,
              "lora_env": os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING")}
    f.write(json.dumps(record) + "\\n")
os.environ["PYTHONPATH"] = REPO
os.execv(sys.executable, [sys.executable, "-m", "tests.fakes.openai_server", "--host", args.host,
                          "--port", args.port, "--model", args.model, "--script", "model"])
"""

CRASHING_STUB = """
import sys
print("INFO loading weights", flush=True)
print("RuntimeError: CUDA out of memory (stand-in)", file=sys.stderr, flush=True)
sys.exit(3)
"""

HANGING_STUB = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
print("INFO still loading weights", flush=True)
time.sleep(60)
"""


def write_stub(folder: Path, body: str) -> Path:
    path = folder / "vllm"
    path.write_text(f"#!{sys.executable}\nREPO = {str(REPO)!r}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pid_gone(pid: int) -> bool:
    """True if the process has exited (a zombie waiting for a non-reaping init counts)."""
    try:  # the /proc entry disappears once the process is reaped
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def server_config(executable: Path, **overrides: object) -> VllmServerConfig:
    values: dict[str, object] = {
        "executable": str(executable),
        "port": free_port(),
        "startup_timeout_s": 30.0,
        "shutdown_timeout_s": 5.0,
        "max_lora_rank": 16,
    }
    return VllmServerConfig.model_validate(values | overrides)


def test_command_line_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", raising=False)
    config = VllmServerConfig(port=9001, max_lora_rank=32, extra_args=["--dtype", "bfloat16"])
    server = VllmServer(config, "org/model")
    assert server.command() == [
        "vllm", "serve", "org/model", "--host", "127.0.0.1", "--port", "9001",
        "--enable-lora", "--max-lora-rank", "32", "--dtype", "bfloat16",
    ]  # fmt: skip
    assert server.environment()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert server.base_url == "http://127.0.0.1:9001/v1"

    plain = VllmServer(config.model_copy(update={"enable_lora": False, "host": "0.0.0.0"}), "m")
    assert "--enable-lora" not in plain.command()
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in plain.environment()
    assert plain.base_url == "http://127.0.0.1:9001/v1"  # a wildcard bind is reached on loopback


def test_served_model_name_flag_names_the_model() -> None:
    vllm = VllmServerConfig(extra_args=["--served-model-name", "alias"])
    managed = ManagedVllmBackend(InferenceConfig(backend="vllm", vllm=vllm), "org/model")
    assert managed.model_name == "alias" and isinstance(managed, Backend)


def test_start_serve_restart_on_new_checkpoint_and_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "launches.jsonl"
    monkeypatch.setenv("STUB_RECORD", str(record))
    vllm = server_config(write_stub(tmp_path, SERVING_STUB))
    config = InferenceConfig(backend="vllm", vllm=vllm, request_timeout_s=5.0)
    managed = ManagedVllmBackend(config, "base/model", log_path=tmp_path / "vllm.log")
    pgids: list[int] = []

    async def scenario() -> None:
        await asyncio.to_thread(managed.start)
        pgids.append(managed.server.pid or 0)
        assert await managed.client.health()
        first = (await managed.complete([ChatRequest([{"role": "user", "content": "hi"}])]))[0]
        assert first.ok and first.text == "base/model" and first.model == "base/model"

        await managed.publish_checkpoint(tmp_path / "ckpt-1")
        pgids.append(managed.server.pid or 0)
        assert await managed.client.list_models() == [str(tmp_path / "ckpt-1")]
        second = (await managed.complete([ChatRequest([{"role": "user", "content": "hi"}])]))[0]
        assert second.ok and second.text == str(tmp_path / "ckpt-1")

        await managed.client.load_lora_adapter("adapter-1", str(tmp_path / "lora-1"))
        via_adapter = ChatRequest([{"role": "user", "content": "hi"}], model="adapter-1")
        assert (await managed.complete([via_adapter]))[0].text == "adapter-1"
        await managed.aclose()

    try:  # never leave a server behind if an assertion fails mid-way
        asyncio.run(scenario())
    finally:
        managed.server.stop()

    launches = [json.loads(line) for line in record.read_text().splitlines()]
    assert [launch["argv"][:2] for launch in launches] == [
        ["serve", "base/model"],
        ["serve", str(tmp_path / "ckpt-1")],
    ]
    assert all(launch["lora_env"] == "True" for launch in launches)
    assert "--enable-lora" in launches[0]["argv"]
    assert not managed.server.running
    for pgid in pgids:
        assert not group_alive(pgid)
    for launch in launches:
        assert pid_gone(launch["worker"])


def test_a_server_that_exits_at_once_fails_fast_with_its_log_tail(tmp_path: Path) -> None:
    server = VllmServer(
        server_config(write_stub(tmp_path, CRASHING_STUB)), "m", log_path=tmp_path / "v.log"
    )
    started = time.monotonic()
    with pytest.raises(InferenceError) as caught:
        server.start()
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert "exited with code 3" in message and "CUDA out of memory (stand-in)" in message
    assert not server.running


def test_a_server_that_never_gets_healthy_is_killed_after_the_startup_timeout(
    tmp_path: Path,
) -> None:
    config = server_config(
        write_stub(tmp_path, HANGING_STUB), startup_timeout_s=1.0, shutdown_timeout_s=0.5
    )
    server = VllmServer(config, "m", log_path=tmp_path / "v.log")
    started = time.monotonic()
    with pytest.raises(InferenceError, match=r"not healthy within 1\.0s") as caught:
        server.start()
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 5, elapsed
    assert "still loading weights" in str(caught.value)
    assert not server.running


def test_a_port_already_in_use_is_refused_before_launch(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        config = server_config(write_stub(tmp_path, CRASHING_STUB), port=port)
        server = VllmServer(config, "m", log_path=tmp_path / "v.log")
        with pytest.raises(InferenceError, match="already in use"):
            server.start()
    assert server.pid is None


def test_a_missing_executable_is_an_inference_error(tmp_path: Path) -> None:
    server = VllmServer(server_config(tmp_path / "no-such-vllm"), "m", log_path=tmp_path / "l")
    with pytest.raises(InferenceError, match="cannot launch"):
        server.start()


def test_context_manager_stops_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_RECORD", str(tmp_path / "launches.jsonl"))
    config = server_config(write_stub(tmp_path, SERVING_STUB), enable_lora=False)
    with VllmServer(config, "m", log_path=tmp_path / "v.log") as server:
        pgid = server.pid
        assert server.running and pgid is not None
    assert not server.running and not group_alive(pgid)
    assert os.path.getsize(tmp_path / "v.log") > 0
