"""The files a stage reads, named by config fields, and digests of their contents.

A cache key that holds a file's path and not its contents reuses a stale result after the file
is edited (a tighter sandbox policy, a fixed held-out environment, a new corpus). Every
path-valued field of :class:`~spade.config.CampaignConfig` is listed here: :data:`FILE_FIELDS`
(read by the stages whose config sections hold the field, :mod:`spade.pipeline.keys`) or
:data:`NOT_READ` (where results go, not what they are computed from).

A file's digest is the sha256 of its bytes; a folder's is over its files' relative paths and
bytes, sorted by relative path (``__pycache__`` folders skipped: Python writes them, nobody
edits them). A file named by a field that does not exist is a :class:`ConfigError`, never a key.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from spade.config import CampaignConfig
from spade.config.pools import pool_ref
from spade.curriculum.stored import pool_digest
from spade.errors import ConfigError
from spade.storage import ObjectStore

BIG_FILE = 1 << 20
"""Files from this size up are hashed once per process per (size, mtime, inode): model weights
and corpora are read at every key; small files are always re-read (an edit within one clock
tick of the last hash would keep its size and mtime)."""

_big: dict[tuple[str, int, int, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """sha256 (hex) of one file's bytes."""
    st = path.stat()
    stamp = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    if st.st_size >= BIG_FILE and stamp in _big:
        return _big[stamp]
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    digest = h.hexdigest()
    if st.st_size >= BIG_FILE:
        _big[stamp] = digest
    return digest


def path_digest(path: Path, field: str) -> str:
    """sha256 of a file, or of a folder's files (sorted by relative path); ConfigError naming
    ``field`` when the path is missing."""
    path = path.expanduser()
    if path.is_file():
        return file_sha256(path)
    if not path.is_dir():
        raise ConfigError(f"{field}: {path} does not exist (its contents are in the cache key)")
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            full = Path(dirpath, name)
            rel = full.relative_to(path).as_posix()
            h.update(f"{rel}\0{file_sha256(full)}\0".encode())
    return h.hexdigest()


def _policy(cfg: CampaignConfig) -> str | None:
    from spade.sandbox.policy import policy_path  # pydantic + yaml, as spade.config

    path = policy_path(cfg.sandbox.policy_path)
    # no file: the built-in policy, which is code (spade.sandbox.policy, in the stage's closure)
    return None if path is None else path_digest(Path(path), "sandbox.policy_path")


def _corpus(cfg: CampaignConfig) -> str | None:
    import fsspec  # a dependency of the corpus reader, imported only here
    from fsspec.utils import get_protocol

    from spade.designer.corpus import BUILTIN_WIKI, builtin_wiki_file

    field = "corpus.path"
    if cfg.run.env_source == "pool":  # nothing is designed: the corpus is not read
        return None
    if cfg.corpus.path == BUILTIN_WIKI:
        return path_digest(builtin_wiki_file(), field)
    if get_protocol(cfg.corpus.path) in ("file", "local"):
        return path_digest(Path(fsspec.core.strip_protocol(cfg.corpus.path)), field)
    # a remote corpus: the store's own identifier of each object's contents (an ETag on S3),
    # not a download of the whole corpus at every key
    fs, root = fsspec.core.url_to_fs(cfg.corpus.path, **cfg.corpus.storage_options)
    if not fs.exists(root):
        raise ConfigError(f"{field}: {cfg.corpus.path} does not exist")
    files = sorted(fs.find(root)) if fs.isdir(root) else [root]
    return hashlib.sha256("\0".join(f"{f}={fs.checksum(f)}" for f in files).encode()).hexdigest()


def env_files_digest(entries: list[str], field: str) -> str:
    """What the environment files ``entries`` name hold, as one digest: each file's path and
    sha256, in the order the stage lists them."""
    from spade.curriculum.pool import env_files  # the files the stage reads, as it lists them

    h = hashlib.sha256()
    for path in env_files(entries, field):
        h.update(f"{path}\0{file_sha256(path)}\0".encode())
    return h.hexdigest()


def pool_drawn(cfg: CampaignConfig) -> bool:
    """Whether a round can draw from ``run.env_pool`` (:meth:`RunConfig.draws_pool`): only
    then does the pool stage read the pool's and the held-out files."""
    return cfg.run.draws_pool()


def _env_pool(cfg: CampaignConfig) -> str | None:
    if not pool_drawn(cfg):
        return None
    from spade.pipeline.pool import pool_digest_of  # files, stored pools, or the examples

    return pool_digest_of(cfg)


def _seed_pool(cfg: CampaignConfig) -> str | None:
    pool = cfg.memory.seed_pool
    if pool is not None and (name := pool_ref(pool)) is not None:  # a stored pool: its index
        return pool_digest(ObjectStore.from_config(cfg.storage), name)
    return None if pool is None else path_digest(Path(pool), "memory.seed_pool")


def _model(cfg: CampaignConfig) -> str | None:
    path = Path(cfg.model.name_or_path).expanduser()
    # not a local path: a shipped alias (pinned by its installed package) or a hub id, which
    # spade.inference.models resolves the same way; the name is the key
    return path_digest(path, "model.name_or_path") if path.exists() else None


FILE_FIELDS: dict[str, Callable[[CampaignConfig], str | None]] = {
    "sandbox.policy_path": _policy,
    "corpus.path": _corpus,
    "run.heldout_envs": lambda cfg: env_files_digest(cfg.run.heldout_envs, "run.heldout_envs"),
    "run.env_pool": _env_pool,
    "memory.seed_pool": _seed_pool,
    "model.name_or_path": _model,
}
"""Path-valued config fields whose files stages read, and the digest of what each names (None:
no file, e.g. the built-in policy). ``model.gguf_file`` is a name inside ``name_or_path``'s
folder, whose digest covers it."""

NOT_READ: dict[str, str] = {
    "model.gguf_file": "a file name inside model.name_or_path's folder (digested there)",
    "storage.root": "where results are written",
    "metrics.tensorboard_dir": "where metrics are written",
}
"""Path-valued config fields that are no stage's input, and why."""
