"""Reading an environment pool as it is published, from a local path or any fsspec URL
(``s3://``): the environments' sources as text (never run here) and what the pool declares
about them.

Layouts, recognised in this order:

- **games folder** (the reference's): ``games/game_*.py`` (or ``game_*.py`` at the top, or any
  ``*.py``), with ``checksums.sha256`` (``sha256sum -c`` format, paths relative to the pool's
  root) and/or ``manifest.jsonl`` (a row per game: its file and ``sha256``, and any metadata);
- **Hugging Face dataset on disk**: a ``save_to_disk`` folder (``state.json`` and
  ``dataset_info.json``, or ``dataset_dict.json`` for splits), read with ``datasets``;
- **hub-style dataset folder**: ``data/*.parquet`` (or ``data/*.jsonl``);
- **shard set**: a ``.jsonl`` or ``.parquet`` file, or a folder of them.

A row holds the code in ``code``, ``env_code`` or ``source``, its name in ``name``, ``env_id``,
``id`` or ``file``, and may declare ``sha256``. A declared checksum that does not match, a
listed file that is missing, a source that is not UTF-8 or a row without code is a *rejection*
(:class:`SourceEnv` with ``problem``), reported with the verifier's, never dropped silently.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import fsspec

from spade.curriculum.pool import CODE_FIELDS, code_of, jsonl_objects
from spade.errors import ConfigError

NAME_FIELDS = ("name", "env_id", "id", "file")
SHA_FIELDS = ("sha256", "code_sha256")
CHECKSUMS = "checksums.sha256"
MANIFEST = "manifest.jsonl"


@dataclass
class SourceEnv:
    """One environment of a source pool, as read (its code is untrusted text)."""

    name: str
    code: str | None
    declared_sha256: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # the pool's other fields for it
    problem: str | None = None  # a rejection before verification: its kind ...
    reason: str | None = None  # ... and why

    @property
    def sha256(self) -> str | None:
        return None if self.code is None else hashlib.sha256(self.code.encode()).hexdigest()


@dataclass
class PoolSource:
    """What :func:`read_source` found: the layout's name and the environments in order."""

    layout: str
    envs: list[SourceEnv]


def read_source(url: str, storage_options: Mapping[str, Any] | None = None) -> PoolSource:
    """The environments of the pool at ``url`` (see the module's docstring for the layouts).

    Raises:
        ConfigError: nothing at ``url``, or no layout recognised there.
    """
    fs, root = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    root = root.rstrip("/") or root
    if not fs.exists(root):
        raise ConfigError(f"no environment pool at {url}")
    if fs.isfile(root):
        return _shards(fs, [root], url)
    names = {posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False)}
    if "games" in names and fs.isdir(f"{root}/games"):
        return _games(fs, root, f"{root}/games")
    if ({"state.json", "dataset_info.json"} <= names) or "dataset_dict.json" in names:
        return _saved_dataset(url, storage_options)
    if "data" in names and (shards := _shard_files(fs, f"{root}/data")):
        return _shards(fs, shards, url, "hub dataset folder")
    if shards := _shard_files(fs, root):
        return _shards(fs, shards, url)
    if _py_files(fs, root):
        return _games(fs, root, root)
    raise ConfigError(
        f"{url}: no environment pool layout found (games/game_*.py, *.py, a Hugging Face"
        " dataset folder, data/*.parquet, or .jsonl / .parquet shards)"
    )


def _shard_files(fs: Any, folder: str) -> list[str]:
    found = [p for p in fs.ls(folder, detail=False) if p.endswith((".jsonl", ".parquet"))]
    return sorted(found)


def _py_files(fs: Any, folder: str) -> list[str]:
    found = [p for p in fs.ls(folder, detail=False) if p.endswith(".py")]
    games = [p for p in found if posixpath.basename(p).startswith("game_")]
    return sorted(games or [p for p in found if not posixpath.basename(p).startswith("_")])


def _games(fs: Any, root: str, folder: str) -> PoolSource:
    """A folder of ``.py`` sources with the checksums and manifest its root declares."""
    files = _py_files(fs, folder)
    declared, manifest = _declarations(fs, root)
    found = [name for name, present in ((CHECKSUMS, declared), (MANIFEST, manifest)) if present]
    envs = []
    for path in files:
        rel = path[len(root) + 1 :]
        base = posixpath.basename(rel)
        meta = manifest.get(rel) or manifest.get(base) or {}
        want = declared.pop(rel, None) or declared.pop(base, None)
        sha = meta.get("sha256") if isinstance(meta.get("sha256"), str) else None
        env = _decoded(posixpath.splitext(base)[0], fs.cat_file(path))
        env.meta = {k: v for k, v in meta.items() if k not in (*CODE_FIELDS, *SHA_FIELDS)}
        _check(env, [(want, CHECKSUMS), (sha, MANIFEST)])
        envs.append(env)
    for rel, digest in sorted(declared.items()):
        if fs.exists(f"{root}/{rel}"):  # another file of the pool (its manifest, a README)
            _check_file(fs, root, rel, digest)
        elif rel.endswith(".py"):  # a listed game that is not there: a broken download
            stem = posixpath.splitext(posixpath.basename(rel))[0]
            why = f"{rel} is listed in {CHECKSUMS} but absent"
            envs.append(SourceEnv(stem, None, digest, problem="missing", reason=why))
    return PoolSource("games folder" + (f" with {', '.join(found)}" if found else ""), envs)


def _check_file(fs: Any, root: str, rel: str, digest: str) -> None:
    """A file of the pool besides its games must match its checksum too: a corrupt manifest
    (whose checksums and metadata the import would trust) refuses the whole pool."""
    actual = hashlib.sha256(fs.cat_file(f"{root}/{rel}")).hexdigest()
    if actual != digest:
        raise ConfigError(
            f"{rel}: sha256 {actual} differs from the {digest} declared in {CHECKSUMS}: the"
            " pool's own files are corrupt"
        )


def _declarations(fs: Any, root: str) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """``checksums.sha256`` (path -> sha256) and ``manifest.jsonl`` (path and basename ->
    row), each empty when absent."""
    declared: dict[str, str] = {}
    if fs.exists(f"{root}/{CHECKSUMS}"):
        for line in fs.cat_file(f"{root}/{CHECKSUMS}").decode().splitlines():
            digest, _, path = line.strip().partition(" ")
            if digest:  # `sha256sum` writes "<hex>  <path>" (or " *<path>" in binary mode)
                declared[path.strip().lstrip("*").removeprefix("./")] = digest.lower()
    manifest: dict[str, dict[str, Any]] = {}
    if fs.exists(f"{root}/{MANIFEST}"):
        for _, row in jsonl_objects(fs.cat_file(f"{root}/{MANIFEST}").decode(), MANIFEST):
            keys = ("file", "path", "filename", "game_file")
            path = next((row[k] for k in keys if isinstance(row.get(k), str)), None)
            if path is not None:
                manifest[path.removeprefix("./")] = manifest[posixpath.basename(path)] = row
    return declared, manifest


def _decoded(name: str, data: bytes) -> SourceEnv:
    try:  # not UTF-8: a rejection (the jail reads sources as UTF-8), reported with the rest
        return SourceEnv(name, data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return SourceEnv(name, None, problem="unreadable", reason=f"not UTF-8: {exc}")


def _check(env: SourceEnv, declared: Iterable[tuple[str | None, str]]) -> None:
    """Mark ``env`` rejected when a declared sha256 differs from its source's."""
    for want, where in declared:
        if want is None or env.problem is not None:
            continue
        env.declared_sha256 = want
        if want != env.sha256:
            env.problem = "checksum"
            env.reason = f"sha256 {env.sha256} differs from the {want} declared in {where}"


def _shards(fs: Any, paths: list[str], url: str, layout: str = "shard set") -> PoolSource:
    rows: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        base = posixpath.basename(path)
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq  # only for parquet pools

            with fs.open(path, "rb") as f:
                found = pq.read_table(f).to_pylist()
        else:
            found = [row for _, row in jsonl_objects(fs.cat_file(path).decode(), base)]
        rows += [(f"{base}:{i}", row) for i, row in enumerate(found, start=1)]
    return PoolSource(layout, [_from_row(where, row) for where, row in rows])


def _saved_dataset(url: str, storage_options: Mapping[str, Any] | None) -> PoolSource:
    import datasets  # only for dataset folders: a heavy import

    loaded = datasets.load_from_disk(url, storage_options=dict(storage_options or {}) or None)
    parts = loaded.values() if isinstance(loaded, datasets.DatasetDict) else [loaded]
    rows = [row for part in parts for row in part]
    envs = [_from_row(f"row {i}", row) for i, row in enumerate(rows, start=1)]
    return PoolSource("Hugging Face dataset (save_to_disk)", envs)


def _from_row(where: str, row: Mapping[str, Any]) -> SourceEnv:
    """One environment from a JSONL / parquet / dataset row."""
    name = next((str(row[k]) for k in NAME_FIELDS if row.get(k) not in (None, "")), where)
    name = posixpath.splitext(posixpath.basename(name))[0] if name.endswith(".py") else name
    code = code_of(row)
    meta = {k: v for k, v in row.items() if k not in (*CODE_FIELDS, *SHA_FIELDS)}
    if code is None:
        fields = " / ".join(CODE_FIELDS)
        return SourceEnv(name, None, meta=meta, problem="no_code", reason=f"{where}: no {fields}")
    env = SourceEnv(name, code, meta=meta)
    sha = next((row[k] for k in SHA_FIELDS if isinstance(row.get(k), str)), None)
    _check(env, [(sha, f"{where}'s sha256")])
    return env


__all__ = ["PoolSource", "SourceEnv", "read_source"]
