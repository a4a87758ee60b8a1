"""open_backend: which model each backend is given (vLLM with a stand-in ``vllm`` executable).

The stand-in (``SERVING_STUB``) parses ``serve MODEL ... [--served-model-name NAME]``, records
its argv, and execs the OpenAI stand-in serving the model under the name vLLM would use (NAME,
else MODEL).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from spade.config import CampaignConfig, ModelConfig, load_config
from spade.errors import ConfigError
from spade.inference.base import ChatRequest
from spade.inference.factory import (
    open_backend,
    served_model_name,
    vllm_inference_config,
    vllm_model_source,
)
from spade.inference.models import converted_cache_dir, resolve_model
from spade.testing.openai_server import FakeOpenAIServer
from tests.inference.test_vllm_server import SERVING_STUB, free_port, write_stub


def vllm_config(tmp_path: Path, **overrides: object) -> CampaignConfig:
    values: dict[str, object] = {
        "inference.backend": "vllm",
        "inference.request_timeout_s": 10.0,
        "inference.max_retries": 0,
        "inference.vllm.executable": str(write_stub(tmp_path, SERVING_STUB)),
        "inference.vllm.port": free_port(),
        "inference.vllm.startup_timeout_s": 30.0,
        "inference.vllm.shutdown_timeout_s": 5.0,
    }
    return load_config(overrides=values | overrides)


def launch_and_ask(cfg: CampaignConfig, record: Path) -> tuple[list[str], str, str]:
    """Open the backend, ask once; (the argv vllm got, the answer, the model it names)."""

    async def go() -> tuple[str, str]:
        async with open_backend(cfg) as backend:
            (done,) = await backend.complete([ChatRequest([{"role": "user", "content": "hi"}])])
            assert done.ok, done.failure
            return done.text, backend.model_name

    text, name = asyncio.run(go())
    (argv,) = [json.loads(line)["argv"] for line in record.read_text().splitlines()]
    return argv, text, name


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "launches.jsonl"
    monkeypatch.setenv("STUB_RECORD", str(path))
    return path


# ------------------------------------------------------------------------------------- vLLM


def test_vllm_gets_the_absolute_path_of_a_relative_local_folder(
    tmp_path: Path, record: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "weights" / "my-model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    cfg = vllm_config(tmp_path, **{"model.name_or_path": "weights/my-model"})
    argv, text, name = launch_and_ask(cfg, record)
    assert argv[:2] == ["serve", str(folder)]
    assert text == name == str(folder)  # vLLM names the model after the path it loaded
    assert "--served-model-name" not in argv


def test_vllm_gets_the_converted_copy_of_the_shipped_smollm2(
    tmp_path: Path, record: Path, smol_env: Path
) -> None:
    cfg = vllm_config(tmp_path, **{"inference.served_model": "smollm2"})
    assert cfg.model.name_or_path == "smollm2-135m-instruct"  # the default alias
    argv, text, name = launch_and_ask(cfg, record)
    converted = converted_cache_dir(resolve_model(cfg.model))
    assert argv[:2] == ["serve", str(converted)]
    assert converted.is_relative_to(smol_env) and (converted / "config.json").is_file()
    assert argv[argv.index("--served-model-name") + 1] == "smollm2"
    assert text == name == "smollm2"  # requests ask for the name the server serves


def test_vllm_passes_a_hub_id_on_and_refuses_a_missing_path(tmp_path: Path) -> None:
    hub = ModelConfig(name_or_path="HuggingFaceTB/SmolLM2-135M-Instruct")
    assert vllm_model_source(hub) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    with pytest.raises(ConfigError, match="does not exist"):
        vllm_model_source(ModelConfig(name_or_path=str(tmp_path / "absent")))
    with pytest.raises(ConfigError, match="must be local folders"):
        vllm_model_source(ModelConfig(name_or_path="org/model", gguf_file="m.gguf"))


def test_served_model_becomes_the_vllm_served_name_once() -> None:
    plain = load_config(overrides={"inference.backend": "vllm"}).inference
    assert vllm_inference_config(plain) is plain
    named = plain.model_copy(update={"served_model": "agent"})
    assert vllm_inference_config(named).vllm.extra_args == ["--served-model-name", "agent"]
    vllm = named.vllm.model_copy(update={"extra_args": ["--served-model-name", "agent"]})
    same = named.model_copy(update={"vllm": vllm})
    assert vllm_inference_config(same).vllm.extra_args == ["--served-model-name", "agent"]
    vllm = named.vllm.model_copy(update={"extra_args": ["--served-model-name", "other"]})
    with pytest.raises(ConfigError, match="disagree"):
        vllm_inference_config(named.model_copy(update={"vllm": vllm}))


# ----------------------------------------------------------------------------- openai server


def test_openai_asks_for_the_served_model() -> None:
    cfg = load_config(overrides={"inference.backend": "openai", "inference.served_model": "m"})
    assert served_model_name(cfg) == "m"
    hub = load_config(overrides={"inference.backend": "openai", "model.name_or_path": "org/x"})
    assert served_model_name(hub) == "org/x"  # how vLLM names a model started from its id


def test_openai_with_the_alias_needs_served_model() -> None:
    cfg = load_config(overrides={"inference.backend": "openai"})
    with pytest.raises(ConfigError, match=r"set inference\.served_model"):
        served_model_name(cfg)

    async def go() -> None:
        async with open_backend(cfg):
            raise AssertionError("opened a backend for a model no server serves")

    with pytest.raises(ConfigError, match="smollm2-135m-instruct"):
        asyncio.run(go())


def test_openai_backend_talks_to_the_served_model() -> None:
    with FakeOpenAIServer("served-name", texts=["hello"]) as server:
        cfg = load_config(
            overrides={
                "inference.backend": "openai",
                "inference.base_url": server.url,
                "inference.served_model": "served-name",
            }
        )

        async def go() -> str:
            async with open_backend(cfg) as backend:
                (done,) = await backend.complete([ChatRequest([{"role": "user", "content": "x"}])])
                return done.text

        assert asyncio.run(go()) == "hello"
        assert [r["model"] for r in server.chat_requests] == ["served-name"]
