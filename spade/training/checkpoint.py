"""Save training state through any fsspec URL, atomically, each rank writing its own files.

Each save is a folder ``{root}/step-{step:08d}/`` under ``root`` (a local folder or
``s3://bucket/prefix``; ``storage_options`` go to fsspec) in the format
:mod:`spade.inference.checkpoints` documents (its files, the manifest written last, what makes
a folder a checkpoint), which also reads, verifies and lists them.

With its model files (``config.json``, ``generation_config.json``, the tokenizer's files) a
full checkpoint folder is a Hugging Face model folder: ``AutoModelForCausalLM.from_pretrained``
and ``vllm serve`` load it as is (they ignore the optimizer, trainer and manifest files). The
weights files carry safetensors' ``{"format": "pt"}`` metadata, which transformers checks.
A folder without a complete manifest is an incomplete save: skipped when listing, refused when
loading, and deleted by :func:`prune_checkpoints` once a newer complete one exists.

Several ranks save one checkpoint together (:class:`spade.training.trainer_state.TrainerState`):
rank 0 prepares the folder, every rank writes its own files (its optimizer shard, the weight
shards it was given) with :func:`write_stream` / :func:`write_file`, and rank 0 writes the
manifest last with every rank's entries (:func:`commit_manifest`). :func:`save_checkpoint` is
the same for one process.

Atomicity. On a local filesystem each file is written to a temporary name, fsynced and
``os.replace``-d into place; the manifest goes last, then the folder is fsynced, so a kill (or a
power loss) at any point leaves either no manifest or a complete checkpoint. On object stores
(S3 and the like) every PUT - single or multipart - is atomic, and S3 lists are strongly
consistent, so writing the manifest as the last object suffices; a file is streamed into a
multipart upload (fsspec's buffered writer: a few MB in memory at a time), which a failure
aborts and a kill leaves invisible (let a bucket lifecycle rule abort those). On other remote
filesystems without rename, a torn file is still caught by its checksum. Optimizer state is
streamed by ``torch.save`` into the file; a weights file is serialised in memory first (safetensors
writes whole files), so full weights are cut into shards of at most ``shard_bytes``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import IO, Any

import safetensors.torch
import torch
from fsspec.implementations.local import LocalFileSystem
from pydantic import BaseModel

from spade.inference.checkpoints import (
    ADAPTER_CONFIG,
    FORMAT,
    KNOWN_FILES,
    MANIFEST,
    MODEL_FILE,
    OPTIMIZER_SHARD,
    TRAINER,
    WEIGHTS_FILES,
    WEIGHTS_INDEX,
    WEIGHTS_SHARD,
    Kind,
    Verify,
    checkpoint_fs,
    complete_info,
    fs_uri,
    optimizer_shard_name,
    step_folders,
    weights_shard_name,
)
from spade.storage.store import TMP_PREFIX, atomic_write

logger = logging.getLogger(__name__)

DEFAULT_SHARD_BYTES = 4 * 2**30
FileEntry = dict[str, Any]  # {"bytes": n, "sha256": hex}


def config_hash(model: BaseModel) -> str:
    """First 16 hex chars of the sha256 of the model's canonical JSON dump."""
    canonical = json.dumps(
        model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def dedupe_storage(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
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


# ------------------------------------------------------------------------------------ files


class _Hashing:
    """A binary file that counts and hashes what goes through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.sha256, self.bytes = raw, hashlib.sha256(), 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.sha256.update(data)
        self.bytes += len(data)
        self.raw.write(data)
        return len(data)

    def flush(self) -> None:
        self.raw.flush()

    def entry(self) -> FileEntry:
        return {"bytes": self.bytes, "sha256": self.sha256.hexdigest()}


@contextlib.contextmanager
def _open_for_write(fs: Any, path: str) -> Iterator[_Hashing]:
    """A hashing writer whose file appears at ``path`` whole, or not at all if the block
    raises: locally a temporary sibling, fsynced and renamed; remotely fsspec's buffered upload,
    discarded (a multipart upload aborted) on failure."""
    if isinstance(fs, LocalFileSystem):
        folder, name = os.path.split(path)
        tmp = os.path.join(folder, f"{TMP_PREFIX}{uuid.uuid4().hex}-{name}")
        try:  # a failed write must not leave its temporary file behind
            with open(tmp, "wb") as raw:
                writer = _Hashing(raw)
                yield writer
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return
    raw = fs.open(path, "wb")
    try:  # an upload that failed half-way must not be completed into a torn object
        yield _Hashing(raw)
    except BaseException:
        discard = getattr(raw, "discard", None)
        if callable(discard):
            discard()
        raise
    raw.close()


def write_stream(fs: Any, path: str, write: Callable[[IO[bytes]], object]) -> FileEntry:
    """``write(file)`` into ``path`` atomically, streamed; the file's manifest entry."""
    with _open_for_write(fs, path) as out:
        write(out)  # type: ignore[arg-type]  # a file-like object with write() and flush()
    return out.entry()


def write_file(fs: Any, path: str, data: bytes) -> FileEntry:
    """``data`` into ``path`` atomically; the file's manifest entry."""
    return write_stream(fs, path, lambda f: f.write(data))


def save_torch(fs: Any, path: str, obj: Any) -> FileEntry:
    """``torch.save(obj)`` streamed into ``path`` (no whole-file buffer); its entry."""
    return write_stream(fs, path, lambda f: torch.save(obj, f))


def save_safetensors(fs: Any, path: str, tensors: Mapping[str, torch.Tensor]) -> FileEntry:
    """One safetensors file of ``tensors`` (with ``{"format": "pt"}``) at ``path``; its entry."""
    data = safetensors.torch.save(dedupe_storage(tensors), metadata={"format": "pt"})
    return write_file(fs, path, data)


# ------------------------------------------------------------------------------- the folder


def step_path(root: str, step: int, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    """The filesystem and the folder path of step ``step`` under ``root``."""
    if step < 0:
        raise ValueError(f"need step >= 0, not {step}")
    fs, root_path = checkpoint_fs(root, storage_options)
    return fs, f"{root_path}/step-{step:08d}"


def prepare_folder(fs: Any, path: str) -> None:
    """An empty folder at ``path``: a folder already there (a crashed save, or a save being
    redone) is removed first."""
    if fs.exists(path):
        logger.warning("replacing existing checkpoint folder %s", fs_uri(fs, path))
        fs.rm(path, recursive=True)
    if isinstance(fs, LocalFileSystem):
        fs.makedirs(path, exist_ok=True)


def check_model_files(model_files: Mapping[str, bytes] | None) -> None:
    """ValueError unless every extra file name is plain and none is one of the format's own."""
    reserved = {*KNOWN_FILES, MANIFEST}
    ours = (OPTIMIZER_SHARD, WEIGHTS_SHARD, MODEL_FILE)
    clashing = [
        n
        for n in model_files or {}
        if n in reserved or ours[0].fullmatch(n) or ours[1].fullmatch(n) or not ours[2].fullmatch(n)
    ]
    if clashing:
        raise ValueError(f"model file names must be plain and new, not {clashing}")


def commit_manifest(
    fs: Any,
    path: str,
    *,
    step: int,
    kind: Kind,
    files: Mapping[str, FileEntry],
    config_hash: str = "",
    parent: str | None = None,
    world_size: int = 1,
) -> str:
    """Write ``manifest.json`` last (the commit marker); the checkpoint's URI."""
    head = {"format": FORMAT, "step": step, "kind": kind, "config_hash": config_hash}
    manifest = {
        **head,
        "parent": parent,
        "created": datetime.now(UTC).isoformat(),
        "world_size": world_size,
        "files": dict(files),
    }
    atomic_write(fs, f"{path}/{MANIFEST}", json.dumps(manifest, indent=2).encode())
    uri = fs_uri(fs, path)
    logger.info("saved checkpoint %s (%d files)", uri, len(files))
    return uri


# ------------------------------------------------------------------------------ full weights


def plan_shards(sizes: Sequence[tuple[str, int]], shard_bytes: int) -> list[list[str]]:
    """Names in order, cut into contiguous shards of at most ``shard_bytes`` (a larger tensor
    alone in its own)."""
    if shard_bytes < 1:
        raise ValueError(f"shard_bytes must be >= 1, got {shard_bytes}")
    shards: list[list[str]] = []
    used = 0
    for name, size in sizes:
        if not shards or (used + size > shard_bytes and shards[-1]):
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += size
    return shards


def shard_files(shards: Sequence[Sequence[str]]) -> tuple[list[str], bytes | None]:
    """The file name of each shard, and transformers' index (None for a single file)."""
    if len(shards) <= 1:
        return [WEIGHTS_FILES["full"]], None
    names = [weights_shard_name(i, len(shards)) for i in range(len(shards))]
    weight_map = {t: names[i] for i, shard in enumerate(shards) for t in shard}
    return names, json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2).encode()


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
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> str:
    """Write ``{root}/step-{step:08d}/`` from one process (manifest last) and return its URI.

    ``optimizer_state`` is rank 0's of one (``optimizer-rank-00000-of-00001.pt``); full weights
    larger than ``shard_bytes`` go into shards with an index. ``model_files``: more files by
    plain name, e.g. :func:`hf_model_files`, covered by the manifest like every other file.
    """
    if kind not in WEIGHTS_FILES:
        raise ValueError(f"need kind 'full' or 'lora', not {kind!r}")
    check_model_files(model_files)
    fs, path = step_path(root, step, storage_options)
    prepare_folder(fs, path)
    files: dict[str, FileEntry] = {}
    if kind == "lora":
        files[WEIGHTS_FILES[kind]] = save_safetensors(fs, f"{path}/{WEIGHTS_FILES[kind]}", tensors)
    else:
        sizes = [(n, t.numel() * t.element_size()) for n, t in tensors.items()]
        shards = plan_shards(sizes, shard_bytes)
        names, index = shard_files(shards)
        for name, shard in zip(names, shards, strict=True):
            part = {t: tensors[t] for t in shard}
            files[name] = save_safetensors(fs, f"{path}/{name}", part)
        if index is not None:
            files[WEIGHTS_INDEX] = write_file(fs, f"{path}/{WEIGHTS_INDEX}", index)
    if adapter_config is not None:
        data = json.dumps(dict(adapter_config), indent=2).encode()
        files[ADAPTER_CONFIG] = write_file(fs, f"{path}/{ADAPTER_CONFIG}", data)
    for name, data in (model_files or {}).items():
        files[name] = write_file(fs, f"{path}/{name}", data)
    if optimizer_state is not None:
        name = optimizer_shard_name(0, 1)
        files[name] = save_torch(fs, f"{path}/{name}", dict(optimizer_state))
    if trainer_state is not None:
        data = json.dumps(dict(trainer_state)).encode()
        files[TRAINER] = write_file(fs, f"{path}/{TRAINER}", data)
    return commit_manifest(
        fs, path, step=step, kind=kind, files=files, config_hash=config_hash, parent=parent
    )


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
    fs, root_path = checkpoint_fs(root, storage_options)
    candidates = step_folders(fs, root_path)
    kept: list[tuple[int, str]] = []
    for step, path in reversed(candidates):
        if len(kept) == keep_last:
            break
        if complete_info(fs, path, step, verify) is not None:
            kept.append((step, path))
    if not kept:
        return []
    newest = kept[0][0]
    deleted = []
    for step, path in candidates:
        if step < newest and (step, path) not in kept:
            fs.rm(path, recursive=True)
            deleted.append(fs_uri(fs, path))
            logger.info("pruned checkpoint folder %s", deleted[-1])
    return deleted
