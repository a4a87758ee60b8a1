"""Reading one checkpoint file by file, each verified against the manifest as it is read.

:class:`CheckpointReader` opens a checkpoint folder (format: :mod:`spade.inference.checkpoints`)
and hands out its files one at a time: a small file as verified bytes, a large one as a verified
local path. On a local store that is the file itself, after a streamed pass of sha256 over it; on
a remote store (S3 and the like) the file is streamed into a temporary folder of the reader's
while its digest is computed, so no file is ever held in memory whole and a torn or tampered
file is refused before anything reads it. Weights are read tensor by tensor from those paths
(``safetensors.safe_open``); a training rank reads only its own optimizer shard
(:meth:`CheckpointReader.optimizer_state`), memory-mapped.

Use it as a context manager: closing removes the temporary copies.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Self

import safetensors
import torch
from fsspec.implementations.local import LocalFileSystem

from spade.errors import CheckpointError
from spade.inference.checkpoints import (
    CHUNK,
    OPTIMIZER,
    OPTIMIZER_SHARD,
    WEIGHTS_FILES,
    WEIGHTS_INDEX,
    CheckpointInfo,
    check_file,
    checkpoint_fs,
    fs_uri,
    optimizer_shard_name,
    read_manifest,
)

__all__ = ["CheckpointReader"]


class CheckpointReader:
    """One complete checkpoint, read file by file (see the module docstring)."""

    def __init__(self, uri: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.fs, self.path = checkpoint_fs(uri, storage_options)
        self.manifest = read_manifest(self.fs, self.path)
        self.info = CheckpointInfo.from_manifest(fs_uri(self.fs, self.path), self.manifest)
        self._local = isinstance(self.fs, LocalFileSystem)
        self._tmp: Path | None = None
        self._paths: dict[str, Path] = {}
        self._read: dict[str, None] = {}  # names, in the order they were first read

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the local copies of remote files."""
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._paths.clear()

    @property
    def read_files(self) -> list[str]:
        """The files read so far, in order (each is read once)."""
        return list(self._read)

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        return dict(self.manifest["files"])

    def has(self, name: str) -> bool:
        return name in self.manifest["files"]

    # ------------------------------------------------------------------------------ raw files

    def _where(self, name: str) -> str:
        return fs_uri(self.fs, f"{self.path}/{name}")

    def local_path(self, name: str) -> Path:
        """A verified path of file ``name`` on this machine (see the module docstring)."""
        if name in self._paths:
            return self._paths[name]
        meta = self.manifest["files"].get(name)
        if meta is None:
            raise CheckpointError(f"{self._where(name)}: not in the manifest")
        source = f"{self.path}/{name}"
        if self._local:
            path = Path(source)
            _copy_verified(self.fs, source, None, self._where(name), meta)
        else:
            if self._tmp is None:
                self._tmp = Path(tempfile.mkdtemp(prefix="spade-ckpt-"))
            path = self._tmp / name
            _copy_verified(self.fs, source, path, self._where(name), meta)
        self._paths[name] = path
        self._read[name] = None
        return path

    def verify_all(self) -> None:
        """Check every file the manifest names (size and sha256, streamed; nothing kept)."""
        for name, meta in self.manifest["files"].items():
            if name not in self._paths:
                _copy_verified(self.fs, f"{self.path}/{name}", None, self._where(name), meta)

    def read_bytes(self, name: str) -> bytes:
        """File ``name``, verified, in memory (for the small ones: JSON, configs)."""
        try:  # listed in the manifest, gone from the store
            data = bytes(self.fs.cat_file(f"{self.path}/{name}"))
        except FileNotFoundError as exc:
            raise CheckpointError(f"{self._where(name)}: missing") from exc
        meta = self.manifest["files"].get(name)
        if meta is None:
            raise CheckpointError(f"{self._where(name)}: not in the manifest")
        check_file(self._where(name), len(data), hashlib.sha256(data).hexdigest(), meta)
        self._read[name] = None
        return data

    def json_file(self, name: str) -> dict[str, Any] | None:
        """A JSON file of the checkpoint (trainer state, adapter config); None if absent."""
        if not self.has(name):
            return None
        return dict(json.loads(self.read_bytes(name)))

    # -------------------------------------------------------------------------------- weights

    def weight_files(self) -> list[str]:
        """The files holding the weights, in order: the adapter file, the one full file, or
        the shards the index names."""
        kind = self.manifest["kind"]
        if kind == "lora" or not self.has(WEIGHTS_INDEX):
            return [WEIGHTS_FILES[kind]]
        index = json.loads(self.read_bytes(WEIGHTS_INDEX))
        names = sorted(set(index["weight_map"].values()))
        missing = [n for n in names if not self.has(n)]
        if missing:
            raise CheckpointError(f"{self._where(WEIGHTS_INDEX)} names files not saved: {missing}")
        return names

    def weight_map(self) -> dict[str, str]:
        """Each weight's name and the file holding it (headers only: no tensor is read)."""
        out: dict[str, str] = {}
        for name in self.weight_files():
            with safetensors.safe_open(str(self.local_path(name)), framework="pt") as f:
                out.update(dict.fromkeys(f.keys(), name))
        return out

    def tensor_shapes(self) -> dict[str, list[int]]:
        """Each weight's shape, from the files' headers."""
        out: dict[str, list[int]] = {}
        for name in self.weight_files():
            with safetensors.safe_open(str(self.local_path(name)), framework="pt") as f:
                out.update({k: list(f.get_slice(k).get_shape()) for k in f.keys()})  # noqa: SIM118
        return out

    def tensor(self, key: str, file: str) -> torch.Tensor:
        """Weight ``key`` from weights file ``file`` (see :meth:`weight_map`)."""
        with safetensors.safe_open(str(self.local_path(file)), framework="pt") as f:
            return f.get_tensor(key)

    def iter_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Every weight, ``(name, CPU tensor)``, one at a time (file by file)."""
        for name in self.weight_files():
            with safetensors.safe_open(str(self.local_path(name)), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                    yield key, f.get_tensor(key)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every weight in memory."""
        return dict(self.iter_tensors())

    # ---------------------------------------------------------------------- optimizer shards

    @property
    def world_size(self) -> int:
        """The training ranks that saved the checkpoint (1 for format 1)."""
        return self.info.world_size

    def optimizer_state(self, rank: int, world: int) -> Any | None:
        """Rank ``rank``'s optimizer state (of ``world`` ranks), read from its own file only;
        None when the checkpoint has none. A format-1 ``optimizer.pt`` (every rank's state in
        one file) is returned whole. CheckpointError when it was saved by another number of
        ranks: each shard is one rank's ZeRO partition, which another world size cannot use."""
        if self.has(OPTIMIZER):
            return torch.load(self.local_path(OPTIMIZER), map_location="cpu", weights_only=True)
        shards = [n for n in self.manifest["files"] if OPTIMIZER_SHARD.fullmatch(n)]
        if not shards:
            return None
        if world != self.world_size:
            raise CheckpointError(
                f"{self.info.uri} was saved by {self.world_size} training rank(s), this run has"
                f" {world}: each rank's optimizer shard is its own partition of the state. Resume"
                f" with training.ranks {self.world_size} (or start a new campaign)"
            )
        path = self.local_path(optimizer_shard_name(rank, world))
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)

    def all_optimizer_states(self, map_location: str | torch.device = "cpu") -> Any | None:
        """Every rank's optimizer state: format 1's ``optimizer.pt`` as saved, else one rank's
        state (a checkpoint of one rank) or ``{"ranks": [state, ...]}``; None without any."""
        if self.has(OPTIMIZER):
            return torch.load(
                self.local_path(OPTIMIZER), map_location=map_location, weights_only=True
            )
        world = self.world_size
        names = [optimizer_shard_name(r, world) for r in range(world)]
        if not all(self.has(n) for n in names):
            return None
        states = [
            torch.load(self.local_path(n), map_location=map_location, weights_only=True)
            for n in names
        ]
        return states[0] if world == 1 else {"ranks": states}


def _copy_verified(
    fs: Any, source: str, dest: Path | None, where: str, meta: Mapping[str, Any]
) -> None:
    """Stream ``source`` once, into ``dest`` if given, and check its size and sha256 against
    the manifest entry ``meta``; CheckpointError if it is missing or differs."""
    h, size = hashlib.sha256(), 0
    out = dest.open("wb") if dest is not None else None
    try:  # listed in the manifest, gone from the store
        with fs.open(source, "rb") as src:
            while chunk := src.read(CHUNK):
                h.update(chunk)
                size += len(chunk)
                if out is not None:
                    out.write(chunk)
    except FileNotFoundError as exc:
        raise CheckpointError(f"{where}: missing") from exc
    finally:
        if out is not None:
            out.close()
    check_file(where, size, h.hexdigest(), meta)
