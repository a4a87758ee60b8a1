"""Preflight: one clear error per bad input, naming the config field, before anything expensive."""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from spade.config import CampaignConfig, load_config
from spade.errors import ConfigError, InferenceError, SandboxError, StorageError
from spade.placement import Placement, check_placement
from spade.preflight import PREFLIGHT_CHECKS, S3_FAST_FAIL, PreflightResult, preflight
from spade.processes import free_port
from spade.testing.scripted_designer import write_corpus
from spade.testing.tiny_models import tiny_llama_config


def config(**overrides: object) -> CampaignConfig:
    return load_config(overrides={k.replace("__", "."): v for k, v in overrides.items()})


def only(cfg: CampaignConfig, check: str) -> PreflightResult:
    [result] = preflight(cfg, checks=[check])
    assert result.name == check and result.ok and result.seconds >= 0
    return result


def write_policy(path: Path, **fields: object) -> Path:
    path.write_text(yaml.safe_dump(fields))
    return path


def hf_folder(folder: Path) -> Path:
    """A Hugging Face model folder with a tiny config and tokenizer (no weights: not needed)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "ok": 3}
    inner = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=inner, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tokenizer.save_pretrained(folder)
    tiny_llama_config(4, hidden=16, layers=1, heads=2, kv_heads=2).save_pretrained(folder)
    return folder


# -- the config itself and the API ------------------------------------------------------------


def test_invalid_config_value_names_the_field():
    with pytest.raises(ConfigError) as err:
        load_config(overrides={"model.max_context_tokens": 1})
    assert "model.max_context_tokens" in str(err.value)
    assert "greater than or equal to 256" in str(err.value)


def test_unknown_check_is_refused():
    with pytest.raises(ConfigError, match="unknown preflight checks"):
        preflight(config(), checks=["storage", "network"])
    assert PREFLIGHT_CHECKS == (
        "storage", "sandbox", "corpus", "pool", "model", "placement", "plan"
    )  # fmt: skip


def test_stops_at_the_first_failure(tmp_path):
    cfg = config(
        corpus__path=str(tmp_path / "missing.jsonl"),
        inference__backend="openai",
        inference__base_url=f"http://127.0.0.1:{free_port()}/v1",
    )
    with pytest.raises(ConfigError, match=r"corpus\.path"):  # not the (also broken) model
        preflight(cfg, checks=["corpus", "model"])


@pytest.mark.sandbox
def test_every_check_passes_on_a_good_campaign(tmp_path, scripted_server):
    cfg = config(
        storage__root=str(tmp_path / "runs"),
        corpus__path=str(write_corpus(tmp_path / "corpus.jsonl")),
        inference__backend="openai",
        inference__base_url=scripted_server.url,
        inference__served_model=scripted_server.model,
    )
    results = preflight(cfg)
    assert [r.name for r in results] == list(PREFLIGHT_CHECKS)
    assert all(r.ok and r.detail for r in results)


# -- storage ----------------------------------------------------------------------------------


def test_storage_local_folder_passes(tmp_path):
    result = only(config(storage__root=str(tmp_path / "runs")), "storage")
    assert "writable" in result.detail


def test_storage_root_that_is_a_file_fails(tmp_path):
    root = tmp_path / "runs"
    root.write_text("not a folder")
    with pytest.raises(StorageError) as err:
        preflight(config(storage__root=str(root)), checks=["storage"])
    assert f"storage.root '{root}'" in str(err.value)
    assert "is a file, not a folder" in str(err.value)


def test_storage_s3_passes_without_touching_the_users_options(s3_bucket):
    cfg = config(
        storage__root=f"s3://{s3_bucket.name}/campaigns",
        storage__storage_options=dict(s3_bucket.storage_options),
    )
    only(cfg, "storage")
    assert cfg.storage.storage_options == s3_bucket.storage_options  # no config_kwargs added


@pytest.fixture
def closing_endpoint() -> Iterator[tuple[str, Counter[str]]]:
    """An HTTP endpoint that closes every connection unanswered, counting the requests by
    method: an S3 endpoint that is down, as botocore sees it (a retryable error)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)  # accept() wakes up to see the fixture end
    requests: Counter[str] = Counter()
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:  # no client yet: look again
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn, conn.makefile("rb") as request:
                conn.settimeout(None)
                requests[request.readline().split(b" ")[0].decode()] += 1

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", requests
    done.set()
    thread.join()
    server.close()


def test_storage_unreachable_s3_fails_after_one_retry(closing_endpoint):
    """An S3 endpoint that is down: one StorageError naming the field and the endpoint, after
    S3_FAST_FAIL's attempts per request (botocore's default: 5, with backoff, each); the
    user's own config_kwargs win. Counted as requests the endpoint saw, relative to a client
    told to try once, so the retries of the layers above botocore (s3fs) cancel out."""
    endpoint, requests = closing_endpoint
    options = {"endpoint_url": endpoint, "key": "k", "secret": "s"}
    cfg = config(storage__root="s3://spade-nowhere/campaigns", storage__storage_options=options)
    with pytest.raises(StorageError) as err:
        preflight(cfg, checks=["storage"])
    assert "storage.root 's3://spade-nowhere/campaigns'" in str(err.value)
    assert endpoint in str(err.value)
    ours = requests.copy()
    requests.clear()
    once = {**options, "config_kwargs": {"retries": {"total_max_attempts": 1}}}
    with pytest.raises(StorageError):
        preflight(
            config(storage__root=cfg.storage.root, storage__storage_options=once),
            checks=["storage"],
        )
    assert set(ours) == set(requests) == {"PUT"}  # the probe's first write: nothing after it
    attempts = S3_FAST_FAIL["retries"]["total_max_attempts"]
    assert attempts == 2 and ours["PUT"] == attempts * requests["PUT"]


# -- sandbox ----------------------------------------------------------------------------------


@pytest.mark.sandbox
def test_sandbox_passes_with_the_checked_in_policy():
    result = only(config(), "sandbox")
    assert "a jail started" in result.detail


@pytest.mark.sandbox  # needs the nsjail binary: the interpreter is checked after it
def test_sandbox_missing_interpreter_fails(tmp_path):
    policy = write_policy(tmp_path / "policy.yaml", interpreter="/no/such/python3")
    with pytest.raises(SandboxError) as err:
        preflight(config(sandbox__policy_path=str(policy)), checks=["sandbox"])
    assert f"sandbox.policy_path '{policy}'" in str(err.value)
    assert "interpreter '/no/such/python3' does not exist" in str(err.value)


def test_sandbox_missing_nsjail_fails(tmp_path):
    policy = write_policy(tmp_path / "policy.yaml", nsjail_path="/no/such/nsjail")
    with pytest.raises(SandboxError) as err:
        preflight(config(sandbox__policy_path=str(policy)), checks=["sandbox"])
    assert f"sandbox.policy_path '{policy}'" in str(err.value)
    assert "/no/such/nsjail" in str(err.value)


def test_sandbox_invalid_policy_file_fails(tmp_path):
    policy = write_policy(tmp_path / "policy.yaml", limits={"processes": 0})
    with pytest.raises(ConfigError) as err:
        preflight(config(sandbox__policy_path=str(policy)), checks=["sandbox"])
    assert f"sandbox.policy_path '{policy}'" in str(err.value)
    assert "limits.processes" in str(err.value)


@pytest.mark.attack
@pytest.mark.sandbox
def test_sandbox_detail_names_the_policy_and_every_limit_in_force():
    from spade.sandbox.cgroups import detect_cgroups
    from spade.sandbox.policy import load_policy, policy_source

    policy = load_policy()
    detail = only(config(), "sandbox").detail
    assert f"policy {policy_source(policy)}" in detail
    assert f"limits: {detect_cgroups(policy).describe(policy.limits)};" in detail
    assert "per process: RLIMIT_AS 768 MiB, RLIMIT_NPROC 16, RLIMIT_CPU 120 s" in detail


@pytest.mark.sandbox
def test_sandbox_limits_on_a_root_cgroup_v1_host():
    """This project's hosts (CI too): root, cgroup v1 memory, pids and cpu hierarchies."""
    from spade.sandbox.cgroups import cgroup_mounts

    if os.geteuid() != 0 or set(cgroup_mounts()[0]) != {"memory", "pids", "cpu"}:
        pytest.skip("not root on a host with cgroup-v1 memory, pids and cpu hierarchies")
    detail = only(config(), "sandbox").detail
    assert "limits: cgroup v1: memory 512 MiB (swap off), pids 64, cpu 1000 ms/s;" in detail


@pytest.mark.attack
@pytest.mark.sandbox  # needs the nsjail binary: the bound is checked after it
def test_sandbox_without_a_memory_bound_fails_when_the_policy_requires_one(tmp_path, monkeypatch):
    from spade.sandbox import cgroups

    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw 0 0\n")  # a host without cgroups (stand-in table)
    monkeypatch.setattr(cgroups, "MOUNTS", mounts)
    policy = write_policy(tmp_path / "policy.yaml", limits={"require_memory_bound": True})
    with pytest.raises(SandboxError) as err:
        preflight(config(sandbox__policy_path=str(policy)), checks=["sandbox"])
    assert f"sandbox.policy_path '{policy}'" in str(err.value)
    assert "limits.require_memory_bound is on, but no memory cgroup" in str(err.value)


# -- corpus -----------------------------------------------------------------------------------


def test_corpus_passes(tmp_path):
    result = only(config(corpus__path=str(write_corpus(tmp_path / "c.jsonl"))), "corpus")
    assert result.detail == "10 usable documents"


def test_corpus_missing_path_fails(tmp_path):
    missing = tmp_path / "nowhere.jsonl"
    with pytest.raises(ConfigError) as err:
        preflight(config(corpus__path=str(missing)), checks=["corpus"])
    assert f"corpus.path '{missing}' does not exist" in str(err.value)


def test_corpus_empty_file_fails(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ConfigError) as err:
        preflight(config(corpus__path=str(empty)), checks=["corpus"])
    assert f"corpus.path '{empty}'" in str(err.value)
    assert "no usable documents" in str(err.value)


def test_corpus_malformed_file_fails(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{not json\n')
    with pytest.raises(ConfigError, match=r"corpus.path '.*bad.jsonl': cannot read corpus"):
        preflight(config(corpus__path=str(bad)), checks=["corpus"])


# -- model ------------------------------------------------------------------------------------


def test_model_shipped_smollm2_passes(smol_env, tmp_path, monkeypatch):
    """Before its conversion the shipped GGUF's header is checked (converting costs ~30 s);
    once converted, the copy is loaded and named with its model type and vocabulary."""
    from spade.inference.models import converted_cache_dir, load_model_and_tokenizer, resolve_model

    resolved = resolve_model(config().model)
    assert isinstance(resolved.path, Path) and resolved.gguf_file is not None
    gguf = resolved.path / resolved.gguf_file
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "nothing-converted"))
    detail = only(config(), "model").detail
    assert detail == f"{gguf}: GGUF header ok (converted on first load)"
    monkeypatch.setenv("SPADE_CACHE", str(smol_env))
    _, tokenizer = load_model_and_tokenizer(resolved, "float32", "cpu")  # converts once
    detail = only(config(), "model").detail
    assert detail == f"{converted_cache_dir(resolved)}: llama, vocabulary of {len(tokenizer)}"
    assert len(tokenizer) == 49152  # SmolLM2's vocabulary


def test_model_folder_passes(tmp_path):
    folder = hf_folder(tmp_path / "tiny")
    result = only(config(model__name_or_path=str(folder)), "model")
    assert "llama" in result.detail


def test_model_folder_with_corrupt_config_fails(tmp_path):
    folder = hf_folder(tmp_path / "tiny")
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ConfigError) as err:
        preflight(config(model__name_or_path=str(folder)), checks=["model"])
    assert f"model.name_or_path '{folder}'" in str(err.value)
    assert "cannot load its config or tokenizer" in str(err.value)


def test_model_missing_path_fails(tmp_path):
    missing = str(tmp_path / "no-model")
    with pytest.raises(ConfigError) as err:
        preflight(config(model__name_or_path=missing), checks=["model"])
    assert f"model.name_or_path '{missing}'" in str(err.value)
    assert "does not exist" in str(err.value)


def test_model_unknown_hub_name_fails_at_the_hub_probe():
    """Refused by the short-timeout Hub probe (offline: the cache alone; no network: its
    connection error; online: not found), never handed to transformers, whose loader retries
    an unreachable Hub for ~25 s."""
    name = "spade-no-such-org/spade-no-such-model"
    with pytest.raises(ConfigError) as err:
        preflight(config(model__name_or_path=name), checks=["model"])
    assert f"model.name_or_path '{name}'" in str(err.value)
    assert "Hugging Face cache" in str(err.value)  # _check_hub's answer, either way
    assert "cannot load its config or tokenizer" not in str(err.value)


def test_model_corrupt_gguf_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "gguf"
    folder.mkdir()
    (folder / "model.gguf").write_bytes(b"not a gguf file")
    with pytest.raises(ConfigError, match=r"model.name_or_path '.*gguf'.*not a GGUF file"):
        preflight(config(model__name_or_path=str(folder)), checks=["model"])


def test_openai_server_passes(scripted_server):
    cfg = config(
        inference__backend="openai",
        inference__base_url=scripted_server.url,
        inference__served_model=scripted_server.model,
    )
    assert scripted_server.model in only(cfg, "model").detail


def test_openai_server_down_fails():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(InferenceError) as err:
        cfg = config(
            inference__backend="openai", inference__base_url=url, inference__served_model="m"
        )
        preflight(cfg, checks=["model"])
    assert f"inference.base_url '{url}'" in str(err.value)
    assert "ConnectError" in str(err.value)


def test_openai_model_not_served_fails(scripted_server):
    cfg = config(
        inference__backend="openai",
        inference__base_url=scripted_server.url,
        inference__served_model="some-other-model",
    )
    with pytest.raises(InferenceError) as err:
        preflight(cfg, checks=["model"])
    assert "inference.served_model 'some-other-model' is not served" in str(err.value)
    assert scripted_server.model in str(err.value)


def test_openai_needs_a_served_name_for_the_shipped_alias():
    # the alias names weights inside a Python package: no server serves a model by that name
    with pytest.raises(ConfigError, match=r"inference\.served_model"):
        preflight(config(inference__backend="openai"), checks=["model"])


def test_vllm_executable_passes(smol_env):
    cfg = config(inference__backend="vllm", inference__vllm__executable=sys.executable)
    detail = only(cfg, "model").detail
    assert sys.executable in detail
    assert str(smol_env) in detail  # vLLM will serve the shipped model's converted folder


def test_vllm_missing_executable_fails():
    cfg = config(inference__backend="vllm", inference__vllm__executable="/no/such/vllm")
    with pytest.raises(InferenceError) as err:
        preflight(cfg, checks=["model"])
    assert "inference.vllm.executable '/no/such/vllm'" in str(err.value)


# -- placement ---------------------------------------------------------------------------------

PRESETS = Path(__file__).resolve().parents[1] / "configs"


def fake_nvidia_smi(folder: Path, gpus: int, mib: int = 81559) -> Path:
    """A stand-in ``nvidia-smi``: ``-L`` lists ``gpus`` GPUs, ``--query-gpu=memory.total``
    gives each one's MiB (an H100's 81559 by default), as the real one prints them."""
    lines = "".join(f'echo "GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})"\n' for i in range(gpus))
    sizes = "".join(f'echo "{mib}"\n' for _ in range(gpus))
    path = folder / "nvidia-smi"
    path.write_text(f'#!/bin/sh\nif [ "$1" = "-L" ]; then\n{lines}else\n{sizes}fi\n')
    path.chmod(0o755)
    return folder


def test_placement_on_a_cpu_config_uses_no_gpu():
    assert only(config(model__device="cpu"), "placement").detail.startswith("no GPU used")


def test_placement_refuses_a_cuda_config_on_a_node_without_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this process sees no GPU, whatever the node
    cfg = config(model__device="cuda", inference__backend="vllm")
    with pytest.raises(ConfigError, match=r"GPUs up to index 1 .* has 0 visible GPU"):
        preflight(cfg, checks=["placement"])


@pytest.mark.parametrize("preset", ["games-8gpu", "tooluse-8gpu"])
def test_the_gpu_presets_fit_an_8_gpu_node_and_no_smaller_one(preset, tmp_path, monkeypatch):
    cfg = load_config(PRESETS / f"{preset}.yaml")
    assert check_placement(cfg, 8) == Placement((0, 1, 2, 3), (4, 5, 6, 7))
    with pytest.raises(ConfigError, match=r"up to index 7 .* has 7 visible GPU"):
        check_placement(cfg, 7)

    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, 8)), prepend=os.pathsep)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    detail = only(cfg, "placement").detail
    assert detail == "vLLM serves on GPU 0,1,2,3; training ranks on GPU 4,5,6,7 (8 GPU(s) visible)"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5")  # a worker given 6 of them
    with pytest.raises(ConfigError, match=r"has 6 visible GPU"):
        preflight(cfg, checks=["placement"])


# -- plan --------------------------------------------------------------------------------------


def test_plan_on_a_cpu_config_plans_nothing():
    assert only(config(model__device="cpu"), "plan").detail == "no GPU used: nothing to plan"


@pytest.mark.parametrize("preset", ["games-8gpu", "tooluse-8gpu"])
def test_the_gpu_presets_fit_80_gb_gpus_and_are_refused_on_24_gb_before_round_0(
    preset, tmp_path, monkeypatch
):
    cfg = load_config(PRESETS / f"{preset}.yaml")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, 8)), prepend=os.pathsep)
    detail = only(cfg, "plan").detail
    assert "a training rank needs" in detail and "of 80 GiB" in detail, detail
    small = tmp_path / "small"
    small.mkdir()
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(small, 8, mib=24576)), prepend=os.pathsep)
    with pytest.raises(ConfigError, match=r"a training rank needs .* GiB, its GPU has 24 GiB"):
        preflight(cfg, checks=["plan"])


def test_a_preset_without_activation_checkpointing_is_refused_saying_what_to_change(
    tmp_path, monkeypatch
):
    cfg = load_config(PRESETS / "games-8gpu.yaml", {"training.activation_checkpointing": False})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, 8)), prepend=os.pathsep)
    with pytest.raises(ConfigError, match=r"turn on training\.activation_checkpointing"):
        preflight(cfg, checks=["plan"])
