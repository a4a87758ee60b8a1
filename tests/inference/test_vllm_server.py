"""VllmServer and ManagedVllmBackend with a stand-in ``vllm`` executable (no GPU, no vLLM).

The stand-in is a small script named ``vllm`` that parses ``serve MODEL --host H --port P ...``,
leaves a child process behind in its group (as vLLM's engine workers do) and execs the scripted
OpenAI-compatible server of :mod:`spade.testing.openai_server`, which answers with the name of the
model each request named (``--served-model-name`` if given, else MODEL). A stand-in container
runtime (``docker``) does the same from ``run ... IMAGE serve MODEL ...`` and records ``rm``.

A campaign killed under its server (``kill -9``, an OOM kill) is a parent process, a small script,
that starts the server from a worker thread and is SIGKILLed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest

from spade.config import InferenceConfig, VllmServerConfig, load_config
from spade.errors import ConfigError, InferenceError
from spade.inference.base import Backend, ChatRequest
from spade.inference.factory import vllm_devices
from spade.inference.managed import healthy
from spade.inference.vllm_server import ManagedVllmBackend, VllmServer, group_alive, staging_root
from spade.testing.openai_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[2]

SERVING_STUB = """
import argparse, json, os, subprocess, sys
parser = argparse.ArgumentParser()
parser.add_argument("command")
parser.add_argument("model")
parser.add_argument("--host")
parser.add_argument("--port")
parser.add_argument("--served-model-name")
args, rest = parser.parse_known_args()
worker = subprocess.Popen(["sleep", "300"])  # stays in the group, like vLLM's engine core
with open(os.environ["STUB_RECORD"], "a") as f:
    record = {"argv": sys.argv[1:], "worker": worker.pid,
              "lora_env": os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING"),
              "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}
    f.write(json.dumps(record) + "\\n")
os.environ["PYTHONPATH"] = REPO
os.execv(sys.executable, [sys.executable, "-m", "spade.testing.openai_server", "--host", args.host,
                          "--port", args.port, "--model", args.served_model_name or args.model,
                          "--script", "model", *EXTRA])
"""

CONTAINER_STUB = """
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["STUB_RECORD"], "a") as f:
    f.write(json.dumps({"runtime": argv}) + "\\n")
if argv[0] == "rm":
    sys.exit(0)
assert argv[:2] == ["run", "--rm"], argv
env = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")
serve = argv[argv.index("serve"):]
named = "--served-model-name" in serve
model = serve[serve.index("--served-model-name") + 1] if named else serve[1]
os.environ.update(env, PYTHONPATH=REPO)
os.execv(sys.executable, [sys.executable, "-m", "spade.testing.openai_server", "--host", "127.0.0.1",
                          "--port", serve[serve.index("--port") + 1], "--model", model,
                          "--script", "model"])
"""

CRASHING_STUB = """
import sys
print("INFO loading weights", flush=True)
print("RuntimeError: CUDA out of memory (stand-in)", file=sys.stderr, flush=True)
sys.exit(3)
"""

HANGING_STUB = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
print(f"INFO still loading weights (pid {os.getpid()})", flush=True)
time.sleep(600)
"""

# a campaign's process: starts the server from a worker thread (as asyncio.to_thread does), which
# ends; prints the server's pid (its group's) and lives on until it is killed
PARENT = """
import sys, threading, time
from spade.config import VllmServerConfig
from spade.inference.vllm_server import VllmServer
config = VllmServerConfig.model_validate_json(sys.argv[1])
server = VllmServer(config, "m", log_path=sys.argv[2])
starter = threading.Thread(target=server.start)
starter.start()
starter.join()
print(server.pid, flush=True)
time.sleep(600)
"""


def write_stub(folder: Path, body: str, *, name: str = "vllm", extra: tuple[str, ...] = ()) -> Path:
    """An executable stand-in; ``extra``: more arguments for the OpenAI stand-in it runs."""
    path = folder / name
    path.write_text(f"#!{sys.executable}\nREPO = {str(REPO)!r}\nEXTRA = {list(extra)!r}\n{body}")
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
        "--generation-config", "vllm", "--logprobs-mode", "processed_logprobs",
        "--enable-lora", "--max-lora-rank", "32", "--dtype", "bfloat16",
    ]  # fmt: skip
    kept = config.model_copy(update={"extra_args": ["--logprobs-mode=raw_logprobs"]})
    assert VllmServer(kept, "m").command().count("processed_logprobs") == 0  # the user's choice
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


def test_a_server_that_exits_at_once_fails_at_its_exit_with_its_log_tail(tmp_path: Path) -> None:
    """The exit is noticed, not waited out: the error says so (the start-up timeout, 30 s,
    would say "not healthy within")."""
    server = VllmServer(
        server_config(write_stub(tmp_path, CRASHING_STUB)), "m", log_path=tmp_path / "v.log"
    )
    with pytest.raises(InferenceError) as caught:
        server.start()
    message = str(caught.value)
    assert "exited with code 3 during start-up" in message and "not healthy" not in message
    assert "CUDA out of memory (stand-in)" in message
    assert not server.running


def test_a_server_that_never_gets_healthy_is_killed_after_the_startup_timeout(
    tmp_path: Path,
) -> None:
    """It waited the start-up timeout, said so, and killed the server, which ignores SIGTERM
    (it would sleep 10 minutes otherwise)."""
    config = server_config(
        write_stub(tmp_path, HANGING_STUB), startup_timeout_s=1.0, shutdown_timeout_s=0.5
    )
    server = VllmServer(config, "m", log_path=tmp_path / "v.log")
    started = time.monotonic()
    with pytest.raises(InferenceError, match=r"not healthy within 1\.0s") as caught:
        server.start()
    assert time.monotonic() - started >= 1.0
    assert "still loading weights" in str(caught.value)
    assert not server.running
    pid = int(re.findall(r"\(pid (\d+)\)", server.log_tail())[-1])  # its own group's leader
    assert pid_gone(pid) and not group_alive(pid)


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


# ------------------------------------------------------------------ a campaign killed under it


def _serve_from_a_parent(
    tmp_path: Path, config: VllmServerConfig
) -> tuple[subprocess.Popen[str], int]:
    """A parent process serving ``config`` (:data:`PARENT`), and its server's group."""
    env = os.environ | {"PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", PARENT, config.model_dump_json(), str(tmp_path / "v.log")]
    parent = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert parent.stdout is not None
    said = parent.stdout.readline().strip()
    if not said.isdigit():
        parent.kill()
        parent.wait()
        pytest.fail(f"the parent started no server ({said!r}):\n{(tmp_path / 'v.log').read_text()}")
    return parent, int(said)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_for(condition: Callable[[], bool]) -> None:
    """Poll ``condition``; the deadline is a safety net, the caller asserts what it sees."""
    deadline = time.monotonic() + 60
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)


def _end(parent: subprocess.Popen[str], pgid: int) -> None:
    """Whatever the test saw, leave no parent and no server behind."""
    parent.kill()
    parent.wait()
    if group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):  # it may end on its own meanwhile
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.parametrize("how", ["executable", "container"])
def test_a_server_outlives_the_thread_that_started_it_but_not_its_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """SIGKILL of the process that started the server (``kill -9`` of ``spade run``, an OOM
    kill): the server's group goes with its engine-like child, a container is removed, and the
    port is free for the resumed campaign. The worker thread that started the server ended
    first, and the server kept serving."""
    record = tmp_path / "launches.jsonl"
    monkeypatch.setenv("STUB_RECORD", str(record))
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    if how == "executable":
        config = server_config(write_stub(tmp_path, SERVING_STUB), enable_lora=False)
    else:
        runtime = write_stub(tmp_path, CONTAINER_STUB, name="docker")
        box = {"runtime": str(runtime), "image": "img:1"}
        config = server_config(runtime, enable_lora=False, container=box)
    parent, pgid = _serve_from_a_parent(tmp_path, config)
    try:  # never leave the server behind, whatever is seen
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            assert healthy(client, f"http://127.0.0.1:{config.port}/health")
        launched = [json.loads(line) for line in record.read_text().splitlines()]
        workers = [launch["worker"] for launch in launched if "worker" in launch]
        assert len(workers) == (how == "executable")
        parent.kill()
        parent.wait()

        def removed() -> bool:
            calls = [json.loads(line).get("runtime") for line in record.read_text().splitlines()]
            return ["rm", "-f", f"spade-vllm-{config.port}-{parent.pid}"] in calls

        def gone() -> bool:
            return not group_alive(pgid) and all(map(pid_gone, workers))

        _wait_for(
            lambda: gone() and not _listening(config.port) and (how != "container" or removed())
        )
        assert not group_alive(pgid) and all(pid_gone(w) for w in workers)
        assert not _listening(config.port)
        assert how != "container" or removed()  # a killed docker client leaves its container
    finally:
        _end(parent, pgid)
    said = (tmp_path / "v.log").read_text()
    assert f"pid {parent.pid} is gone: stopping vLLM server on port {config.port}" in said


def test_the_next_start_stops_a_server_a_killed_process_left_and_takes_its_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Everything of the killed process but the server's group was killed with it (as a
    ``pkill -9`` would), so the server and its worker run on, holding the port: the next start
    (a ``spade resume``) finds the group's record, its owner dead, stops it, says so, and
    serves on the port."""
    record = tmp_path / "launches.jsonl"
    monkeypatch.setenv("STUB_RECORD", str(record))
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    config = server_config(write_stub(tmp_path, SERVING_STUB), enable_lora=False)
    parent, pgid = _serve_from_a_parent(tmp_path, config)
    try:  # never leave the server behind, whatever is seen
        (launch,) = [json.loads(line) for line in record.read_text().splitlines()]
        others = [p for p in psutil.Process(parent.pid).children() if p.pid != pgid]
        for other in others:
            other.kill()
        _wait_for(lambda: all(pid_gone(other.pid) for other in others))  # zombies of the parent
        assert all(pid_gone(other.pid) for other in others)
        parent.kill()
        parent.wait()
        assert group_alive(pgid) and _listening(config.port)  # left running, holding the port
        with (
            caplog.at_level("WARNING", logger="spade.processes"),
            VllmServer(config, "resumed", log_path=tmp_path / "v2.log") as server,
        ):
            assert server.running and server.pid != pgid
            assert not group_alive(pgid) and pid_gone(launch["worker"])
    finally:
        _end(parent, pgid)
    assert f"vLLM server on port {config.port} (m) (process group {pgid}" in caplog.text
    assert f"started by pid {parent.pid}) outlived its owner: stopping it" in caplog.text
    assert [json.loads(line)["argv"][1] for line in record.read_text().splitlines()] == [
        "m",
        "resumed",
    ]
    assert not list((tmp_path / "cache" / "processes").iterdir())  # both records removed


# ----------------------------------------------------------------------- weights versions, image


def test_container_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    folder = (tmp_path / "ckpt").resolve()
    folder.mkdir()
    staged = staging_root().resolve()
    config = VllmServerConfig.model_validate(
        {
            "port": 9001,
            "max_lora_rank": 32,
            "extra_args": ["--dtype", "bfloat16", "--served-model-name", "alias"],
            "container": {"image": "vllm/vllm-openai:v0.11.0"},
        }
    )
    server = VllmServer(config, str(folder), served_name="r0001-agent")
    assert server.command() == [
        "docker", "run", "--rm", "--name", f"spade-vllm-9001-{os.getpid()}",
        "-p", "127.0.0.1:9001:9001", "--gpus", "all",
        "-e", "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
        "-v", f"{folder}:{folder}:ro", "-v", f"{staged}:{staged}:ro",
        "--ipc=host", "--entrypoint", "vllm", "vllm/vllm-openai:v0.11.0",
        "serve", str(folder), "--host", "0.0.0.0", "--port", "9001", "--generation-config", "vllm",
        "--logprobs-mode", "processed_logprobs", "--enable-lora", "--max-lora-rank", "32",
        "--dtype", "bfloat16", "--served-model-name", "r0001-agent",
    ]  # fmt: skip

    podman = config.model_copy(
        update={
            "enable_lora": False,
            "host": "::1",
            "extra_args": ["--served-model-name=alias"],
            "container": config.container.model_copy(  # type: ignore[union-attr]
                update={"runtime": "podman", "gpus": None, "extra_args": ["--shm-size=8g"]}
            ),
        }
    )
    hub = VllmServer(podman, "org/model")  # a hub id: nothing to mount, named as configured
    assert hub.command() == [
        "podman", "run", "--rm", "--name", f"spade-vllm-9001-{os.getpid()}",
        "-p", "[::1]:9001:9001", "--shm-size=8g", "--entrypoint", "vllm",
        "vllm/vllm-openai:v0.11.0", "serve", "org/model", "--host", "0.0.0.0", "--port", "9001",
        "--generation-config", "vllm", "--logprobs-mode", "processed_logprobs",
        "--served-model-name=alias",
    ]  # fmt: skip
    hub.served_name = "v2"
    assert hub.command()[-2:] == ["--served-model-name", "v2"]
    assert "--served-model-name=alias" not in hub.command()


def test_a_server_from_an_image_starts_restarts_and_its_container_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "runtime.jsonl"
    monkeypatch.setenv("STUB_RECORD", str(record))
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    runtime = write_stub(tmp_path, CONTAINER_STUB, name="docker")
    vllm = server_config(runtime, container={"runtime": str(runtime), "image": "img:1"})
    config = InferenceConfig(backend="vllm", vllm=vllm, request_timeout_s=5.0)
    ckpt = tmp_path / "ckpt-1"
    ckpt.mkdir()
    managed = ManagedVllmBackend(config, "base/model", log_path=tmp_path / "vllm.log")

    async def scenario() -> list[str]:
        await asyncio.to_thread(managed.start)
        first = await managed.complete([ChatRequest([{"role": "user", "content": "hi"}])])
        await managed.publish_checkpoint(ckpt, "r0001-agent")
        second = await managed.complete([ChatRequest([{"role": "user", "content": "hi"}])])
        await managed.aclose()
        return [first[0].text, second[0].text, second[0].model]

    try:  # never leave a server behind if an assertion fails mid-way
        texts = asyncio.run(scenario())
    finally:
        managed.server.stop()
    assert texts == ["base/model", "r0001-agent", "r0001-agent"]
    calls = [json.loads(line)["runtime"] for line in record.read_text().splitlines()]
    name = managed.server.container_name
    assert [c[0] for c in calls] == ["run", "rm", "run", "rm"]
    assert calls[1] == calls[3] == ["rm", "-f", name]
    assert calls[2][calls[2].index("img:1") :][:2] == ["img:1", "serve"]
    assert f"{ckpt.resolve()}:{ckpt.resolve()}:ro" in calls[2]
    assert (tmp_path / "cache" / "published").is_dir()  # created before it is mounted


def test_each_published_checkpoint_is_served_under_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "launches.jsonl"
    monkeypatch.setenv("STUB_RECORD", str(record))
    vllm = server_config(
        write_stub(tmp_path, SERVING_STUB), extra_args=["--served-model-name", "alias"]
    )
    config = InferenceConfig(backend="vllm", vllm=vllm, request_timeout_s=5.0)
    managed = ManagedVllmBackend(config, "base/model", log_path=tmp_path / "vllm.log")
    request = ChatRequest([{"role": "user", "content": "hi"}])

    async def scenario() -> list[str]:
        await asyncio.to_thread(managed.start)
        names = [(await managed.complete([request]))[0].model]
        for version in ("r0000-agent", "r0001-agent"):
            await managed.publish_checkpoint(tmp_path / version, version)
            (completion,) = await managed.complete([request])
            assert completion.ok and completion.text == version
            names.append(completion.model)
        await managed.aclose()
        return names

    try:  # never leave a server behind if an assertion fails mid-way
        names = asyncio.run(scenario())
    finally:
        managed.server.stop()
    assert names == ["alias", "r0000-agent", "r0001-agent"]
    argvs = [json.loads(line)["argv"] for line in record.read_text().splitlines()]
    assert [a[1] for a in argvs] == ["base/model", *(str(tmp_path / v) for v in names[1:])]
    for argv, name in zip(argvs, names, strict=True):
        assert argv.count("--served-model-name") == 1
        assert argv[argv.index("--served-model-name") + 1] == name


def _adapter(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.safetensors").write_bytes(b"x")
    return folder


def test_a_new_adapter_replaces_the_previous_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeOpenAIServer(check_lora_paths=True) as fake:
        vllm = VllmServerConfig(port=fake.port)
        managed = ManagedVllmBackend(InferenceConfig(backend="vllm", vllm=vllm), fake.model)

        async def scenario() -> None:
            await managed.publish_adapter("v1", _adapter(tmp_path / "v1"))
            assert fake.adapters == {"v1": str(tmp_path / "v1")} and managed.model_name == "v1"
            await managed.publish_adapter("v2", _adapter(tmp_path / "v2"))
            assert fake.adapters == {"v2": str(tmp_path / "v2")} and managed.model_name == "v2"
            await managed.publish_adapter("v2", tmp_path / "v2")  # a retried publish
            assert fake.adapters == {"v2": str(tmp_path / "v2")}
            fake.adapters.clear()  # the server lost v2: its unload fails, the publish does not
            with caplog.at_level("WARNING", logger="spade.inference.openai"):
                await managed.publish_adapter("v3", _adapter(tmp_path / "v3"))
            assert fake.adapters == {"v3": str(tmp_path / "v3")} and managed.model_name == "v3"
            with pytest.raises(InferenceError, match="No adapter found"):
                await managed.publish_adapter("v4", tmp_path / "nothing-here")
            assert managed.adapter == "v3"
            await managed.client.aclose()

        asyncio.run(scenario())
        unloads = [r.body for r in fake.requests if r.path == "/v1/unload_lora_adapter"]
    assert unloads == [{"lora_name": "v1"}, {"lora_name": "v2"}]
    assert "could not unload the previous adapter v2" in caplog.text


def test_the_served_name_follows_the_version_else_the_configuration() -> None:
    def managed(*args: str) -> ManagedVllmBackend:
        vllm = VllmServerConfig(extra_args=list(args))
        return ManagedVllmBackend(InferenceConfig(backend="vllm", vllm=vllm), "org/model")

    assert managed().model_name == "org/model"
    assert managed("--served-model-name=alias").model_name == "alias"
    versioned = managed("--served-model-name", "alias")
    versioned.server.served_name = "r0002-agent"
    assert versioned.server_model_name == "r0002-agent"


# ------------------------------------------------------------------ placement, sampling defaults


def test_the_parallelism_and_the_sampling_defaults_are_passed_from_their_fields() -> None:
    config = VllmServerConfig(
        port=9001, tensor_parallel_size=2, data_parallel_size=4, enable_lora=False
    )
    assert VllmServer(config, "m").serve_args() == [
        "serve", "m", "--host", "127.0.0.1", "--port", "9001",
        "--tensor-parallel-size", "2", "--data-parallel-size", "4",
        "--generation-config", "vllm", "--logprobs-mode", "processed_logprobs",
    ]  # fmt: skip
    auto = config.model_copy(update={"generation_config": "auto", "tensor_parallel_size": 1})
    args = VllmServer(auto, "m").serve_args()
    assert "--tensor-parallel-size" not in args  # 1, vLLM's default
    assert args[args.index("--generation-config") + 1] == "auto"


@pytest.mark.parametrize(
    ("arg", "field"),
    [
        ("--tensor-parallel-size", "tensor_parallel_size"),
        ("-tp", "tensor_parallel_size"),
        ("--tensor_parallel_size=4", "tensor_parallel_size"),
        ("--data-parallel-size=2", "data_parallel_size"),
        ("-dp", "data_parallel_size"),
        ("--generation-config", "generation_config"),
    ],
)
def test_extra_args_that_repeat_a_field_are_refused_naming_it(arg: str, field: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"extra_args holds '{arg}': set inference\.vllm\.{field}"
    ):
        load_config(None, {"inference.vllm.extra_args": [arg, "4"]})
    kept = ["--data-parallel-size-local", "2", "--max-model-len", "4096"]  # other flags pass
    assert VllmServerConfig(extra_args=kept).extra_args == kept


def test_the_server_process_sees_only_its_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Placed on GPUs 2,3 it is launched with CUDA_VISIBLE_DEVICES=2,3; a CPU model (no
    devices) leaves the variable unset."""
    record = tmp_path / "launches.jsonl"
    monkeypatch.setenv("STUB_RECORD", str(record))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = server_config(write_stub(tmp_path, SERVING_STUB), enable_lora=False)
    for devices in [(2, 3), ()]:
        with VllmServer(config, "m", devices=devices, log_path=tmp_path / "v.log") as server:
            assert server.running
    launches = [json.loads(line) for line in record.read_text().splitlines()]
    assert [launch["cuda"] for launch in launches] == ["2,3", None]


def test_gpu_indices_are_this_processs_view_of_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that itself sees GPUs 4-7 (CUDA_VISIBLE_DEVICES) numbers them 0-3, as
    visible_gpus counts them: its index 1 is the node's GPU 5."""
    config = VllmServerConfig(data_parallel_size=2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert VllmServer(config, "m", devices=(1, 2)).environment()["CUDA_VISIBLE_DEVICES"] == "5,6"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaa,GPU-bbb")  # UUIDs are passed on as such
    assert VllmServer(config, "m", devices=(1,)).cuda_visible_devices() == "GPU-bbb"
    with pytest.raises(ConfigError, match=r"GPUs \[1, 2\].*2 GPU\(s\) this process sees"):
        VllmServer(config, "m", devices=(1, 2)).environment()


def test_a_container_gets_the_servers_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = VllmServerConfig(data_parallel_size=4, container={"image": "img"})
    placed = VllmServer(config, "org/model", devices=(0, 1, 2, 3))
    command = placed.command()
    assert command[command.index("--gpus") + 1] == '"device=0,1,2,3"'  # Docker's list form
    assert "CUDA_VISIBLE_DEVICES" not in placed.environment()  # the docker CLI's: not vLLM's
    unplaced = VllmServer(config, "org/model").command()  # a CPU model: the configured value
    assert unplaced[unplaced.index("--gpus") + 1] == "all"
    cdi = VllmServerConfig(data_parallel_size=4, container={"image": "img", "gpus": None})
    assert "--gpus" not in VllmServer(cdi, "org/model", devices=(0, 1, 2, 3)).command()


NVIDIA_SMI = """#!/bin/sh
echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"
echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"
"""


def test_the_factory_places_the_server_as_placement_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cuda: the configured devices; auto on a node with GPUs (a stand-in nvidia-smi lists
    two): the first ones; cpu, or auto without GPUs: none."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(NVIDIA_SMI)
    smi.chmod(0o755)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    base = {"inference.backend": "vllm", "inference.vllm.data_parallel_size": 2}

    def devices(**overrides: object) -> tuple[int, ...]:
        return vllm_devices(load_config(None, {**base, **overrides}))

    assert devices(**{"model.device": "cuda", "inference.vllm.devices": "2,5"}) == (2, 5)
    assert devices(**{"model.device": "cpu"}) == ()
    monkeypatch.setenv("PATH", str(tmp_path), prepend=os.pathsep)
    assert devices(**{"model.device": "auto"}) == (0, 1)
    monkeypatch.setenv("PATH", str(tmp_path / "none"))  # no nvidia-smi: a node without GPUs
    assert devices(**{"model.device": "auto"}) == ()
