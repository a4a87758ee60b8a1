"""Save and resume training state through any fsspec URL, atomically.

Layout under ``root`` (a local folder or ``s3://bucket/prefix``; ``storage_options`` go to
fsspec)::

    {root}/step-{step:08d}/
        model.safetensors          kind "full": every weight
        adapter_model.safetensors  kind "lora": the adapter tensors only (peft's / vLLM's name)
        adapter_config.json        optional (LoRA), so peft / vLLM can load the folder as is
        config.json, tokenizer...  optional (full): ``spade.training.weights.hf_model_files``
        optimizer.pt               optional, ``torch.save`` of the optimizer state dict
        trainer.json               optional, JSON trainer state (step, RNG, sampler, metrics ...)
        manifest.json              written LAST: the commit marker

With its model files (``config.json``, ``generation_config.json``, the tokenizer's files) a
full checkpoint folder is a Hugging Face model folder: ``AutoModelForCausalLM.from_pretrained``
and ``vllm serve`` load it as is (they ignore the optimizer, trainer and manifest files). The
weights files carry safetensors' ``{"format": "pt"}`` metadata, which transformers checks.

``manifest.json`` is ``{"format": 1, "step", "kind", "config_hash", "parent", "created",
"files": {name: {"bytes", "sha256"}}}``. A folder is a checkpoint only when its manifest exists
and every file it names has the recorded size and sha256; anything else is an incomplete save
and is skipped (with a warning) by :func:`list_checkpoints` / :func:`latest_checkpoint`, refused
by :func:`load_checkpoint` and deleted by :func:`prune_checkpoints` once a newer complete one
exists. There is no mutable LATEST pointer: the newest verified manifest is the truth.

Atomicity. On a local filesystem each file is written to a temporary name, fsynced and
``os.replace``-d into place; the manifest goes last, then the folder is fsynced, so a kill (or a
power loss) at any point leaves either no manifest or a complete checkpoint. On object stores
(S3 and the like) every PUT - single or multipart - is atomic, and S3 lists are strongly
consistent, so writing the manifest as the last object suffices; a kill during a multipart
upload leaves an invisible incomplete upload (let a bucket lifecycle rule abort those). On other
remote filesystems without rename, a torn file is still caught by its checksum. Files are
serialised in memory one at a time: saving needs free RAM about the size of the largest file.

A server that cannot read the store (vLLM loads weights and adapters from its own filesystem)
gets a verified local copy from :func:`stage_checkpoint`.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import fsspec
import safetensors.torch
import torch
from fsspec.implementations.local import LocalFileSystem
from pydantic import BaseModel

from spade.errors import CheckpointError
from spade.storage.store import atomic_write

logger = logging.getLogger(__name__)

FORMAT = 1
MANIFEST = "manifest.json"
WEIGHTS_FILES = {"full": "model.safetensors", "lora": "adapter_model.safetensors"}
ADAPTER_CONFIG = "adapter_config.json"
OPTIMIZER = "optimizer.pt"
TRAINER = "trainer.json"
_KNOWN_FILES = {*WEIGHTS_FILES.values(), ADAPTER_CONFIG, OPTIMIZER, TRAINER}
_MODEL_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # a plain name inside the folder
_STEP_DIR = re.compile(r"step-(\d{8,})")
_CHUNK = 16 * 2**20

Kind = Literal["full", "lora"]
Verify = Literal["sha256", "size"]


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint, as its manifest describes it."""

    uri: str
    step: int
    kind: str
    config_hash: str
    parent: str | None
    created: str
    files: dict[str, dict[str, Any]]

    @classmethod
    def from_manifest(cls, uri: str, m: Mapping[str, Any]) -> CheckpointInfo:
        created, config = str(m.get("created", "")), str(m.get("config_hash", ""))
        return cls(uri, int(m["step"]), m["kind"], config, m.get("parent"), created, m["files"])


@dataclass
class LoadedCheckpoint:
    """Everything one checkpoint holds, verified against its manifest."""

    info: CheckpointInfo
    manifest: dict[str, Any]
    tensors: dict[str, torch.Tensor]
    optimizer_state: dict[str, Any] | None
    trainer_state: dict[str, Any] | None
    adapter_config: dict[str, Any] | None

    @property
    def step(self) -> int:
        return self.info.step


def config_hash(model: BaseModel) -> str:
    """First 16 hex chars of the sha256 of the model's canonical JSON dump."""
    canonical = json.dumps(
        model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _fs(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    return fs, path.rstrip("/")


def _uri(fs: Any, path: str) -> str:
    return path if isinstance(fs, LocalFileSystem) else str(fs.unstrip_protocol(path))


def _dedupe_storage(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, contiguous, and tied / aliased tensors cloned (safetensors refuses shared storage)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in tensors.items():
        t = tensor.detach().to("cpu").contiguous()
        if t.untyped_storage().data_ptr() in seen and t.numel():
            t = t.clone()  # tied or aliased: its own storage (the file holds it twice)
        seen.add(t.untyped_storage().data_ptr())
        out[name] = t
    return out


def save_checkpoint(
    root: str,
    step: int,
    *,
    tensors: Mapping[str, torch.Tensor],
    kind: Kind,
    optimizer_state: Mapping[str, Any] | None = None,
    trainer_state: Mapping[str, Any] | None = None,
    config_hash: str = "",
    parent: str | None = None,
    adapter_config: Mapping[str, Any] | None = None,
    model_files: Mapping[str, bytes] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    """Write ``{root}/step-{step:08d}/`` (manifest last) and return its URI.

    ``model_files``: more files by plain name, e.g. :func:`hf_model_files`, written before the
    manifest and covered by it like every other file. A folder already at that step (a crashed
    save, or a save being redone) is replaced.
    """
    if kind not in WEIGHTS_FILES or step < 0:
        raise ValueError(f"need kind 'full' or 'lora' and step >= 0, not {kind!r} and {step}")
    reserved = {*_KNOWN_FILES, MANIFEST}
    clashing = [n for n in model_files or {} if n in reserved or not _MODEL_FILE.fullmatch(n)]
    if clashing:
        raise ValueError(f"model file names must be plain and new, not {clashing}")
    fs, root_path = _fs(root, storage_options)
    path = f"{root_path}/step-{step:08d}"
    if fs.exists(path):
        logger.warning("replacing existing checkpoint folder %s", _uri(fs, path))
        fs.rm(path, recursive=True)
    if isinstance(fs, LocalFileSystem):
        fs.makedirs(path, exist_ok=True)

    def payloads() -> Iterator[tuple[str, bytes]]:  # serialised one at a time: bounded memory
        weights = safetensors.torch.save(_dedupe_storage(tensors), metadata={"format": "pt"})
        yield WEIGHTS_FILES[kind], weights
        if adapter_config is not None:
            yield ADAPTER_CONFIG, json.dumps(dict(adapter_config), indent=2).encode()
        yield from (model_files or {}).items()
        if optimizer_state is not None:
            buf = io.BytesIO()
            torch.save(dict(optimizer_state), buf)
            yield OPTIMIZER, buf.getvalue()
        if trainer_state is not None:
            yield TRAINER, json.dumps(dict(trainer_state)).encode()

    files: dict[str, dict[str, Any]] = {}
    for name, data in payloads():
        atomic_write(fs, f"{path}/{name}", data)
        files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    head = {"format": FORMAT, "step": step, "kind": kind, "config_hash": config_hash}
    manifest = {**head, "parent": parent, "created": datetime.now(UTC).isoformat(), "files": files}
    atomic_write(fs, f"{path}/{MANIFEST}", json.dumps(manifest, indent=2).encode())
    uri = _uri(fs, path)
    logger.info("saved checkpoint %s (%d files)", uri, len(files))
    return uri


def _read_manifest(fs: Any, path: str) -> dict[str, Any]:
    try:
        raw = fs.cat_file(f"{path}/{MANIFEST}")
    except FileNotFoundError as exc:  # the commit marker is absent: the save never finished
        raise CheckpointError(f"{_uri(fs, path)}: no {MANIFEST} (incomplete save)") from exc
    try:
        manifest = json.loads(raw)
    except ValueError as exc:  # a torn manifest (filesystem without atomic writes)
        raise CheckpointError(f"{_uri(fs, path)}: unreadable {MANIFEST}: {exc}") from exc
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if (
        not isinstance(files, dict)
        or manifest.get("format") != FORMAT
        or manifest.get("kind") not in WEIGHTS_FILES
        or WEIGHTS_FILES[manifest["kind"]] not in files
        or not all(n in _KNOWN_FILES or _MODEL_FILE.fullmatch(n) for n in files)
        or MANIFEST in files
        or not all(isinstance(m, dict) and {"bytes", "sha256"} <= set(m) for m in files.values())
    ):
        raise CheckpointError(f"{_uri(fs, path)}: {MANIFEST} is not a format-{FORMAT} manifest")
    return manifest


def _check(where: str, size: int, sha256: str | None, meta: Mapping[str, Any]) -> None:
    """Raise CheckpointError unless ``size`` (and ``sha256`` when given) match the manifest."""
    if size != meta["bytes"]:
        raise CheckpointError(f"{where}: {size} bytes, manifest says {meta['bytes']}")
    if sha256 is not None and sha256 != meta["sha256"]:
        raise CheckpointError(f"{where}: sha256 differs from the manifest")


def _verify(fs: Any, path: str, step: int, verify: Verify) -> dict[str, Any]:
    """The manifest of a complete checkpoint at ``path``; CheckpointError otherwise."""
    manifest = _read_manifest(fs, path)
    if manifest.get("step") != step:
        raise CheckpointError(f"{_uri(fs, path)}: manifest is for step {manifest.get('step')}")
    sizes = {e["name"].rstrip("/").rsplit("/", 1)[-1]: e["size"] for e in fs.ls(path, detail=True)}
    for name, meta in manifest["files"].items():
        where = _uri(fs, f"{path}/{name}")
        if name not in sizes:
            raise CheckpointError(f"{where}: missing")
        _check(where, sizes[name], None, meta)  # cheap first: a truncated file is not read
        if verify == "sha256":  # streamed: a large file is never held in memory whole
            h = hashlib.sha256()
            with fs.open(f"{path}/{name}", "rb") as f:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
            _check(where, sizes[name], h.hexdigest(), meta)
    return manifest


def _candidates(fs: Any, root_path: str) -> list[tuple[int, str]]:
    """``(step, path)`` of every step folder under the root, complete or not, by step."""
    fs.invalidate_cache()  # another process may have saved since this fs instance last listed
    try:
        entries = fs.ls(root_path, detail=False)
    except FileNotFoundError:  # nothing was ever saved under this root
        return []
    names = (entry.rstrip("/") for entry in entries)
    found = [(int(m[1]), n) for n in names if (m := _STEP_DIR.fullmatch(n.rsplit("/", 1)[-1]))]
    return sorted(found)


def _complete(fs: Any, path: str, step: int, verify: Verify) -> CheckpointInfo | None:
    try:
        return CheckpointInfo.from_manifest(_uri(fs, path), _verify(fs, path, step, verify))
    except CheckpointError as exc:  # incomplete or corrupt: skipped, never resumed from
        logger.warning("skipping checkpoint: %s", exc)
        return None


def list_checkpoints(
    root: str, storage_options: Mapping[str, Any] | None = None, *, verify: Verify = "sha256"
) -> list[CheckpointInfo]:
    """Complete checkpoints under ``root``, oldest first; incomplete ones are logged and skipped.

    ``verify="size"`` checks sizes only (no download of every file from an object store).
    """
    fs, root_path = _fs(root, storage_options)
    infos = (_complete(fs, path, step, verify) for step, path in _candidates(fs, root_path))
    return [info for info in infos if info is not None]


def latest_checkpoint(
    root: str, storage_options: Mapping[str, Any] | None = None, *, verify: Verify = "sha256"
) -> CheckpointInfo | None:
    """The newest complete checkpoint (only the newest folders are verified), or None."""
    fs, root_path = _fs(root, storage_options)
    infos = (
        _complete(fs, path, step, verify) for step, path in reversed(_candidates(fs, root_path))
    )
    return next((info for info in infos if info is not None), None)


def load_checkpoint(
    uri: str,
    *,
    map_location: str | torch.device = "cpu",
    storage_options: Mapping[str, Any] | None = None,
) -> LoadedCheckpoint:
    """Read and verify one checkpoint folder; CheckpointError if it is incomplete or corrupt."""
    fs, path = _fs(uri, storage_options)
    manifest = _read_manifest(fs, path)
    blobs: dict[str, bytes] = {}
    for name, meta in manifest["files"].items():
        where = _uri(fs, f"{path}/{name}")
        try:
            blobs[name] = fs.cat_file(f"{path}/{name}")
        except FileNotFoundError as exc:  # listed in the manifest, gone from the store
            raise CheckpointError(f"{where}: missing") from exc
        _check(where, len(blobs[name]), hashlib.sha256(blobs[name]).hexdigest(), meta)
    tensors = safetensors.torch.load(blobs[WEIGHTS_FILES[manifest["kind"]]])
    if torch.device(map_location) != torch.device("cpu"):
        tensors = {k: v.to(map_location) for k, v in tensors.items()}
    optimizer_state = None
    if OPTIMIZER in blobs:
        optimizer_state = torch.load(
            io.BytesIO(blobs[OPTIMIZER]), map_location=map_location, weights_only=True
        )
    return LoadedCheckpoint(
        info=CheckpointInfo.from_manifest(_uri(fs, path), manifest),
        manifest=manifest,
        tensors=tensors,
        optimizer_state=optimizer_state,
        trainer_state=json.loads(blobs[TRAINER]) if TRAINER in blobs else None,
        adapter_config=json.loads(blobs[ADAPTER_CONFIG]) if ADAPTER_CONFIG in blobs else None,
    )


def local_checkpoint_path(
    uri: str, storage_options: Mapping[str, Any] | None = None
) -> Path | None:
    """The checkpoint's folder on this machine's filesystem; None on a remote store."""
    fs, path = _fs(uri, storage_options)
    return Path(path) if isinstance(fs, LocalFileSystem) else None


def stage_checkpoint(
    uri: str,
    dest: str | Path,
    *,
    storage_options: Mapping[str, Any] | None = None,
    skip: frozenset[str] = frozenset({OPTIMIZER, TRAINER}),
) -> Path:
    """A verified local copy of a complete checkpoint's files (less ``skip``) in folder ``dest``.

    For servers that read weights from their own filesystem. The files are streamed into a
    temporary sibling folder, each checked against the manifest's size and sha256, and the folder
    is renamed to ``dest`` last: ``dest`` existing means a complete copy, which is reused as is
    (give each checkpoint its own ``dest``). CheckpointError if the checkpoint is incomplete.
    """
    dest = Path(dest)
    if dest.is_dir():
        return dest
    fs, path = _fs(uri, storage_options)
    manifest = _read_manifest(fs, path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:  # the temporary folder goes whatever happens; only a finished copy is renamed
        for name, meta in manifest["files"].items():
            if name in skip:
                continue
            h, size = hashlib.sha256(), 0
            try:  # listed in the manifest, gone from the store
                with fs.open(f"{path}/{name}", "rb") as src, (tmp / name).open("wb") as out:
                    while chunk := src.read(_CHUNK):
                        h.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            except FileNotFoundError as exc:
                raise CheckpointError(f"{_uri(fs, f'{path}/{name}')}: missing") from exc
            _check(_uri(fs, f"{path}/{name}"), size, h.hexdigest(), meta)
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide it from a server running as another user
        try:
            tmp.rename(dest)
        except OSError:  # another process staged it first: theirs is as good as ours
            if not dest.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("staged checkpoint %s in %s", _uri(fs, path), dest)
    return dest


def prune_checkpoints(
    root: str,
    keep_last: int,
    storage_options: Mapping[str, Any] | None = None,
    *,
    verify: Verify = "sha256",
) -> list[str]:
    """Keep the ``keep_last`` newest complete checkpoints; delete every other step folder older
    than the newest complete one (older complete ones, crashed or corrupt saves). Folders newer
    than the newest complete checkpoint are left alone: they may be saves still in progress.
    Returns the deleted URIs."""
    if keep_last < 1:
        raise ValueError("keep_last must be >= 1: the newest checkpoint is never pruned")
    fs, root_path = _fs(root, storage_options)
    candidates = _candidates(fs, root_path)
    kept: list[tuple[int, str]] = []
    for step, path in reversed(candidates):
        if len(kept) == keep_last:
            break
        if _complete(fs, path, step, verify) is not None:
            kept.append((step, path))
    if not kept:
        return []
    newest = kept[0][0]
    deleted = []
    for step, path in candidates:
        if step < newest and (step, path) not in kept:
            fs.rm(path, recursive=True)
            deleted.append(_uri(fs, path))
            logger.info("pruned checkpoint folder %s", deleted[-1])
    return deleted
