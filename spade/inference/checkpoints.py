"""Checkpoints as the serving side reads them: the folder format, verification and loading.

A checkpoint is a folder ``{root}/step-{step:08d}/`` written by
:mod:`spade.training.checkpoint` (which documents the writing and its atomicity)::

    model.safetensors              kind "full": every weight, in one file ...
    model-00001-of-00004.safetensors  ... or in shards of at most ``checkpoints.shard_mb``,
    model.safetensors.index.json      with transformers' index (what vLLM loads too)
    adapter_model.safetensors      kind "lora": the adapter tensors only (peft's / vLLM's name)
    adapter_config.json            optional (LoRA), so peft / vLLM can load the folder as is
    config.json, tokenizer...      optional (full): ``spade.training.weights.hf_model_files``
    optimizer-rank-00000-of-00004.pt  one per training rank: ``torch.save`` of that rank's
                                   optimizer state (its ZeRO partition), written and read by it
    trainer.json                   optional, JSON trainer state (step, RNG, sampler, metrics ...)
    manifest.json                  written LAST: the commit marker

``manifest.json`` is ``{"format": 2, "step", "kind", "config_hash", "parent", "created",
"world_size", "files": {name: {"bytes", "sha256"}}}``. A folder is a checkpoint only when its
manifest exists and every file it names has the recorded size and sha256; anything else is an
incomplete save and is skipped (with a warning) by :func:`list_checkpoints` /
:func:`latest_checkpoint` and refused by the reader. There is no mutable LATEST pointer: the
newest verified manifest is the truth. Format 1 (one ``optimizer.pt`` holding every rank's
state, one weights file) is still read.

Reading is file by file (:class:`~spade.inference.checkpoint_reader.CheckpointReader`): each
file is verified as it is streamed (from a remote store, into a local temporary copy), so a
rank reads only what it needs (its own optimizer shard) and nothing is held in memory whole.
:func:`load_checkpoint` reads everything into memory, for small models and tests.

It lives in the inference layer because serving a trained version (the backend pool, a vLLM
server that reads weights from its own filesystem: :func:`stage_checkpoint`) needs to read
checkpoints, and inference sits below training; training writes with the same format.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import fsspec
import torch
from fsspec.implementations.local import LocalFileSystem

from spade.errors import CheckpointError

logger = logging.getLogger(__name__)

FORMAT = 2
READABLE_FORMATS = (1, 2)
MANIFEST = "manifest.json"
WEIGHTS_FILES = {"full": "model.safetensors", "lora": "adapter_model.safetensors"}
WEIGHTS_INDEX = "model.safetensors.index.json"  # sharded full weights (transformers' layout)
ADAPTER_CONFIG = "adapter_config.json"
OPTIMIZER = "optimizer.pt"  # format 1: every rank's optimizer state in one file
TRAINER = "trainer.json"
KNOWN_FILES = {*WEIGHTS_FILES.values(), WEIGHTS_INDEX, ADAPTER_CONFIG, OPTIMIZER, TRAINER}
MODEL_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # a plain name inside the folder
OPTIMIZER_SHARD = re.compile(r"optimizer-rank-(\d{5})-of-(\d{5})\.pt")
WEIGHTS_SHARD = re.compile(r"model-(\d{5})-of-(\d{5})\.safetensors")
_STEP_DIR = re.compile(r"step-(\d{8,})")
CHUNK = 16 * 2**20


def optimizer_shard_name(rank: int, world: int) -> str:
    """The file of rank ``rank``'s optimizer state in a checkpoint of ``world`` ranks."""
    return f"optimizer-rank-{rank:05d}-of-{world:05d}.pt"


def weights_shard_name(index: int, count: int) -> str:
    """Shard ``index`` (from 0) of ``count`` full-weight files, as transformers names them."""
    return f"model-{index + 1:05d}-of-{count:05d}.safetensors"


def training_state_file(name: str) -> bool:
    """Whether ``name`` is only for resuming training (optimizer, trainer state): a server
    loading the folder never reads it."""
    return name in (OPTIMIZER, TRAINER) or OPTIMIZER_SHARD.fullmatch(name) is not None


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
    world_size: int = 1  # the training ranks that saved it (one optimizer shard each)

    @classmethod
    def from_manifest(cls, uri: str, m: Mapping[str, Any]) -> CheckpointInfo:
        created, config = str(m.get("created", "")), str(m.get("config_hash", ""))
        world = int(m.get("world_size", 1))
        return cls(
            uri, int(m["step"]), m["kind"], config, m.get("parent"), created, m["files"], world
        )


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


def checkpoint_fs(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and its path there (no trailing slash)."""
    fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    return fs, path.rstrip("/")


def fs_uri(fs: Any, path: str) -> str:
    """``path`` on ``fs`` as a URI (a plain path on the local filesystem)."""
    return path if isinstance(fs, LocalFileSystem) else str(fs.unstrip_protocol(path))


def read_manifest(fs: Any, path: str) -> dict[str, Any]:
    # another process (a rank, the previous stage) may have written the folder since this
    # filesystem listed it: s3fs would answer from its cached listing (absent, or old sizes)
    fs.invalidate_cache(path)
    try:
        raw = fs.cat_file(f"{path}/{MANIFEST}")
    except FileNotFoundError as exc:  # the commit marker is absent: the save never finished
        raise CheckpointError(f"{fs_uri(fs, path)}: no {MANIFEST} (incomplete save)") from exc
    try:
        manifest = json.loads(raw)
    except ValueError as exc:  # a torn manifest (filesystem without atomic writes)
        raise CheckpointError(f"{fs_uri(fs, path)}: unreadable {MANIFEST}: {exc}") from exc
    files = manifest.get("files") if isinstance(manifest, dict) else None
    weights = {WEIGHTS_FILES["full"], WEIGHTS_INDEX} if manifest.get("kind") == "full" else set()
    if manifest.get("kind") == "lora":
        weights = {WEIGHTS_FILES["lora"]}
    if (
        not isinstance(files, dict)
        or manifest.get("format") not in READABLE_FORMATS
        or manifest.get("kind") not in WEIGHTS_FILES
        or not weights & set(files)
        or not all(n in KNOWN_FILES or MODEL_FILE.fullmatch(n) for n in files)
        or MANIFEST in files
        or not all(isinstance(m, dict) and {"bytes", "sha256"} <= set(m) for m in files.values())
    ):
        raise CheckpointError(
            f"{fs_uri(fs, path)}: {MANIFEST} is not a manifest of format {READABLE_FORMATS}"
        )
    return manifest


def check_file(where: str, size: int, sha256: str | None, meta: Mapping[str, Any]) -> None:
    """Raise CheckpointError unless ``size`` (and ``sha256`` when given) match the manifest."""
    if size != meta["bytes"]:
        raise CheckpointError(f"{where}: {size} bytes, manifest says {meta['bytes']}")
    if sha256 is not None and sha256 != meta["sha256"]:
        raise CheckpointError(f"{where}: sha256 differs from the manifest")


def _verify(fs: Any, path: str, step: int, verify: Verify) -> dict[str, Any]:
    """The manifest of a complete checkpoint at ``path``; CheckpointError otherwise."""
    manifest = read_manifest(fs, path)
    if manifest.get("step") != step:
        raise CheckpointError(f"{fs_uri(fs, path)}: manifest is for step {manifest.get('step')}")
    sizes = {e["name"].rstrip("/").rsplit("/", 1)[-1]: e["size"] for e in fs.ls(path, detail=True)}
    for name, meta in manifest["files"].items():
        where = fs_uri(fs, f"{path}/{name}")
        if name not in sizes:
            raise CheckpointError(f"{where}: missing")
        check_file(where, sizes[name], None, meta)  # cheap first: a truncated file is not read
        if verify == "sha256":  # streamed: a large file is never held in memory whole
            h = hashlib.sha256()
            with fs.open(f"{path}/{name}", "rb") as f:
                while chunk := f.read(CHUNK):
                    h.update(chunk)
            check_file(where, sizes[name], h.hexdigest(), meta)
    return manifest


def step_folders(fs: Any, root_path: str) -> list[tuple[int, str]]:
    """``(step, path)`` of every step folder under the root, complete or not, by step."""
    fs.invalidate_cache()  # another process may have saved since this fs instance last listed
    try:
        entries = fs.ls(root_path, detail=False)
    except FileNotFoundError:  # nothing was ever saved under this root
        return []
    names = (entry.rstrip("/") for entry in entries)
    found = [(int(m[1]), n) for n in names if (m := _STEP_DIR.fullmatch(n.rsplit("/", 1)[-1]))]
    return sorted(found)


def complete_info(fs: Any, path: str, step: int, verify: Verify) -> CheckpointInfo | None:
    try:
        return CheckpointInfo.from_manifest(fs_uri(fs, path), _verify(fs, path, step, verify))
    except CheckpointError as exc:  # incomplete or corrupt: skipped, never resumed from
        logger.warning("skipping checkpoint: %s", exc)
        return None


def list_checkpoints(
    root: str, storage_options: Mapping[str, Any] | None = None, *, verify: Verify = "sha256"
) -> list[CheckpointInfo]:
    """Complete checkpoints under ``root``, oldest first; incomplete ones are logged and skipped.

    ``verify="size"`` checks sizes only (no download of every file from an object store).
    """
    fs, root_path = checkpoint_fs(root, storage_options)
    infos = (complete_info(fs, path, step, verify) for step, path in step_folders(fs, root_path))
    return [info for info in infos if info is not None]


def latest_checkpoint(
    root: str, storage_options: Mapping[str, Any] | None = None, *, verify: Verify = "sha256"
) -> CheckpointInfo | None:
    """The newest complete checkpoint (only the newest folders are verified), or None."""
    fs, root_path = checkpoint_fs(root, storage_options)
    infos = (
        complete_info(fs, path, step, verify)
        for step, path in reversed(step_folders(fs, root_path))
    )
    return next((info for info in infos if info is not None), None)


def load_checkpoint(
    uri: str,
    *,
    map_location: str | torch.device = "cpu",
    storage_options: Mapping[str, Any] | None = None,
) -> LoadedCheckpoint:
    """Read and verify one whole checkpoint folder into memory (every weight, every rank's
    optimizer state); CheckpointError if it is incomplete or corrupt. For what one training
    rank needs of a large checkpoint, use :class:`~spade.inference.checkpoint_reader.
    CheckpointReader` instead."""
    from spade.inference.checkpoint_reader import CheckpointReader

    with CheckpointReader(uri, storage_options) as reader:
        reader.verify_all()  # the model files (config, tokenizer) too: all of it is loaded
        tensors = reader.tensors()
        if torch.device(map_location) != torch.device("cpu"):
            tensors = {k: v.to(map_location) for k, v in tensors.items()}
        return LoadedCheckpoint(
            info=reader.info,
            manifest=reader.manifest,
            tensors=tensors,
            optimizer_state=reader.all_optimizer_states(map_location),
            trainer_state=reader.json_file(TRAINER),
            adapter_config=reader.json_file(ADAPTER_CONFIG),
        )


def local_checkpoint_path(
    uri: str, storage_options: Mapping[str, Any] | None = None
) -> Path | None:
    """The checkpoint's folder on this machine's filesystem; None on a remote store."""
    fs, path = checkpoint_fs(uri, storage_options)
    return Path(path) if isinstance(fs, LocalFileSystem) else None


def stage_checkpoint(
    uri: str,
    dest: str | Path,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> Path:
    """A verified local copy of a complete checkpoint's serving files (its training state left
    out: :func:`training_state_file`) in folder ``dest``.

    For servers that read weights from their own filesystem. The files are streamed into a
    temporary sibling folder, each checked against the manifest's size and sha256, and the folder
    is renamed to ``dest`` last: ``dest`` existing means a complete copy, which is reused as is
    (give each checkpoint its own ``dest``). CheckpointError if the checkpoint is incomplete.
    """
    dest = Path(dest)
    if dest.is_dir():
        return dest
    fs, path = checkpoint_fs(uri, storage_options)
    manifest = read_manifest(fs, path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:  # the temporary folder goes whatever happens; only a finished copy is renamed
        for name, meta in manifest["files"].items():
            if training_state_file(name):
                continue
            h, size = hashlib.sha256(), 0
            try:  # listed in the manifest, gone from the store
                with fs.open(f"{path}/{name}", "rb") as src, (tmp / name).open("wb") as out:
                    while chunk := src.read(CHUNK):
                        h.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            except FileNotFoundError as exc:
                raise CheckpointError(f"{fs_uri(fs, f'{path}/{name}')}: missing") from exc
            check_file(fs_uri(fs, f"{path}/{name}"), size, h.hexdigest(), meta)
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide it from a server running as another user
        try:
            tmp.rename(dest)
        except OSError:  # another process staged it first: theirs is as good as ours
            if not dest.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("staged checkpoint %s in %s", fs_uri(fs, path), dest)
    return dest
