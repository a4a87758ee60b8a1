"""Save and resume training state through any fsspec URL, atomically.

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

Atomicity. On a local filesystem each file is written to a temporary name, fsynced and
``os.replace``-d into place; the manifest goes last, then the folder is fsynced, so a kill (or a
power loss) at any point leaves either no manifest or a complete checkpoint. On object stores
(S3 and the like) every PUT - single or multipart - is atomic, and S3 lists are strongly
consistent, so writing the manifest as the last object suffices; a kill during a multipart
upload leaves an invisible incomplete upload (let a bucket lifecycle rule abort those). On other
remote filesystems without rename, a torn file is still caught by its checksum. Files are
serialised in memory one at a time: saving needs free RAM about the size of the largest file.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

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
    OPTIMIZER,
    TRAINER,
    WEIGHTS_FILES,
    Kind,
    Verify,
    checkpoint_fs,
    complete_info,
    fs_uri,
    step_folders,
)
from spade.storage.store import atomic_write

logger = logging.getLogger(__name__)


def config_hash(model: BaseModel) -> str:
    """First 16 hex chars of the sha256 of the model's canonical JSON dump."""
    canonical = json.dumps(
        model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


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
    reserved = {*KNOWN_FILES, MANIFEST}
    clashing = [n for n in model_files or {} if n in reserved or not MODEL_FILE.fullmatch(n)]
    if clashing:
        raise ValueError(f"model file names must be plain and new, not {clashing}")
    fs, root_path = checkpoint_fs(root, storage_options)
    path = f"{root_path}/step-{step:08d}"
    if fs.exists(path):
        logger.warning("replacing existing checkpoint folder %s", fs_uri(fs, path))
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
    uri = fs_uri(fs, path)
    logger.info("saved checkpoint %s (%d files)", uri, len(files))
    return uri


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
