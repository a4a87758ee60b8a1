"""One artifact store over fsspec: a local folder by default, ``s3://`` through s3fs.

Keys are ``/``-separated paths relative to the store's root (``campaign/c1/round-0000/...``).
They are validated: no absolute paths, no ``.`` / ``..`` / empty parts, no glob characters, no
backslashes or control characters; a bad key is an :class:`InvalidKeyError` (a ValueError) that
says why.

Atomicity. On a local filesystem a write goes to a hidden temporary name in the same folder, is
fsynced and ``os.replace``-d into place, then the folder is fsynced: a reader (or a ``list``) sees
the whole new object or none of it, and a kill leaves at most a temporary file that ``list`` and
every reader ignore. On object stores (S3 and compatible) a single PUT - or a multipart upload -
is atomic and listings are strongly consistent, so a plain ``pipe_file`` suffices.

Content-addressed blobs live under ``blobs/sha256/<first two hex>/<sha256>``; writing the same
content twice writes it once (an existing blob whose bytes do not hash to its name is
rewritten), and reading verifies the hash.

Failures. Every failure of the store is a :class:`StorageError` naming the object's URL: an
absent object is an :class:`ObjectMissingError` (also a FileNotFoundError), an object that is not
the JSON it should be an :class:`ObjectCorruptError` (also a ValueError).
"""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import os
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from spade.errors import (
    ConfigValueError,
    InvalidKeyError,
    ObjectCorruptError,
    ObjectMissingError,
    StorageError,
)

if TYPE_CHECKING:
    from spade.config import StorageConfig

logger = logging.getLogger(__name__)

TMP_PREFIX = ".spade-tmp-"
"""Basename prefix of in-flight local writes; never a key part, never listed."""
BLOB_PREFIX = "blobs/sha256"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\*?\[\]]")


def validate_key(key: str, *, what: str = "key") -> str:
    """Return ``key`` unchanged if it is a valid relative store key; InvalidKeyError (a
    ValueError) otherwise."""
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"{what} must be a non-empty string, not {key!r}")
    if key.startswith("/"):
        raise InvalidKeyError(f"{what} {key!r} is absolute: keys are relative to the store root")
    if m := _BAD_CHARS.search(key):
        raise InvalidKeyError(
            f"{what} {key!r} holds {m.group()!r}: no backslash, glob or control characters"
        )
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise InvalidKeyError(
                f"{what} {key!r} has an empty, '.' or '..' part: use plain names joined by '/'"
            )
        if part.startswith(TMP_PREFIX):
            raise InvalidKeyError(f"{what} {key!r}: names starting {TMP_PREFIX!r} are reserved")
    return key


def blob_key(digest: str) -> str:
    """The key of the blob whose sha256 hex digest is ``digest``."""
    if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest):
        raise InvalidKeyError(f"not a sha256 hex digest (64 lowercase hex chars): {digest!r}")
    return f"{BLOB_PREFIX}/{digest[:2]}/{digest}"


def atomic_write(fs: Any, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` on ``fs`` so that readers see all of it or nothing.

    Local: hidden temporary name in the same folder, fsync, ``os.replace``, fsync of the folder.
    Anything else: one ``pipe_file`` (a single PUT or multipart upload: atomic on object stores).
    """
    if not isinstance(fs, LocalFileSystem):
        fs.pipe_file(path, data)
        return
    folder, name = os.path.split(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f"{TMP_PREFIX}{uuid.uuid4().hex}-{name}")
    try:  # a failed write must not leave its temporary file behind
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fd = os.open(folder, os.O_RDONLY)
    try:  # close the descriptor even if fsync fails
        os.fsync(fd)
    finally:
        os.close(fd)


def json_bytes(obj: Any) -> bytes:
    """``obj`` as the store writes JSON: strict (NaN/inf refused: ValueError), sorted keys."""
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    return text.encode()


class ObjectStore:
    """Keys to bytes under one root URL (a local folder or ``s3://bucket/prefix``).

    ``storage_options`` go to fsspec (for S3-compatible endpoints: ``endpoint_url``, ``key``,
    ``secret``, ...). Missing keys raise :class:`ObjectMissingError` (a FileNotFoundError) on
    read; any other failure of the filesystem is a :class:`StorageError` naming the object.
    """

    def __init__(self, root: str, storage_options: Mapping[str, Any] | None = None) -> None:
        if not root:
            raise ConfigValueError("the store root must be a folder or an fsspec URL, not empty")
        self.storage_options: dict[str, Any] = dict(storage_options or {})
        self.fs, path = fsspec.core.url_to_fs(root, **self.storage_options)
        self.root_path: str = path.rstrip("/") or path
        self.local = isinstance(self.fs, LocalFileSystem)

    @classmethod
    def from_config(cls, config: StorageConfig) -> ObjectStore:
        """The store a :class:`spade.config.StorageConfig` describes."""
        return cls(config.root, config.storage_options)

    def __repr__(self) -> str:
        return f"ObjectStore({self.url()!r})"

    # -- paths ------------------------------------------------------------------------------

    def _path(self, key: str) -> str:
        return f"{self.root_path}/{validate_key(key)}"

    def _key(self, path: str) -> str:
        return path.rstrip("/")[len(self.root_path) + 1 :]

    def url(self, key: str = "") -> str:
        """An fsspec URL of ``key`` (``file:///...`` or ``s3://...``): ``fsspec.open(url,
        **storage_options)`` opens it. ``key=""`` gives the root's URL."""
        path = self._path(key) if key else self.root_path
        return str(self.fs.unstrip_protocol(path))

    # -- bytes and JSON ---------------------------------------------------------------------

    def write_bytes(self, key: str, data: bytes) -> None:
        """Atomically create or replace ``key`` with ``data``."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"write_bytes needs bytes, not {type(data).__name__}")
        path = self._path(key)
        try:  # a filesystem failure (network, permissions, full disk) names the object
            atomic_write(self.fs, path, bytes(data))
        except OSError as exc:
            raise StorageError(f"cannot write {self.url(key)}: {exc!r}") from exc

    def write_json(self, key: str, obj: Any) -> None:
        """Atomically write ``obj`` as strict JSON (sorted keys; NaN/inf refused: ValueError)."""
        self.write_bytes(key, json_bytes(obj))

    def read_bytes(self, key: str) -> bytes:
        """The bytes under ``key``; ObjectMissingError (a FileNotFoundError) if absent."""
        path = self._path(key)
        # another process may have written it since we listed its folder: s3fs would take the
        # cached listing's word (absent, or the old size) over the store's
        self.fs.invalidate_cache(path)
        try:  # absent or unreachable: both name the object
            return bytes(self.fs.cat_file(path))
        except FileNotFoundError as exc:
            raise ObjectMissingError(f"no object {self.url(key)}") from exc
        except OSError as exc:
            raise StorageError(f"cannot read {self.url(key)}: {exc!r}") from exc

    def read_json(self, key: str) -> Any:
        """The JSON value under ``key``; ObjectMissingError if absent, ObjectCorruptError (a
        ValueError) if it is not JSON (e.g. truncated)."""
        data = self.read_bytes(key)
        try:  # a torn or tampered object: say which one
            return json.loads(data)
        except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
            raise ObjectCorruptError(f"{self.url(key)} is not valid JSON: {exc}") from exc

    def exists(self, key: str) -> bool:
        """Whether an object (not merely a prefix) is stored under ``key``."""
        path = self._path(key)
        try:  # unreachable store: name the object
            self.fs.invalidate_cache(path)  # another process may have written since we looked
            return bool(self.fs.isfile(path))
        except OSError as exc:
            raise StorageError(f"cannot look up {self.url(key)}: {exc!r}") from exc

    def list(self, prefix: str = "") -> list[str]:
        """Every key equal to ``prefix`` or under ``prefix/``, sorted; ``""`` lists all keys.

        In-flight temporary files of local writes are never listed.
        """
        path = self._path(prefix) if prefix else self.root_path
        self.fs.invalidate_cache(path)
        try:
            found = self.fs.find(path)
        except FileNotFoundError:  # nothing was ever written under this prefix (or root)
            return []
        except OSError as exc:  # unreachable store
            raise StorageError(f"cannot list {self.fs.unstrip_protocol(path)}: {exc!r}") from exc
        keys = []
        for p in found:
            key = self._key(p)
            in_scope = not prefix or key == prefix or key.startswith(prefix + "/")
            if in_scope and not key.rsplit("/", 1)[-1].startswith(TMP_PREFIX):
                keys.append(key)
        return sorted(keys)

    def delete(self, prefix: str) -> builtins.list[str]:
        """Delete ``prefix`` (a key) or everything under ``prefix/``; returns the deleted keys.

        An empty prefix is refused: wiping the whole store takes deleting its root yourself.
        """
        if not prefix:
            raise ValueError("delete needs a non-empty prefix (refusing to wipe the store)")
        keys = self.list(prefix)
        path = self._path(prefix)
        try:  # unreachable store: name the prefix
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)  # also removes stale temporary files under it
            self.fs.invalidate_cache(path)
        except OSError as exc:
            raise StorageError(f"cannot delete {self.url(prefix)}: {exc!r}") from exc
        return keys

    def check(self) -> None:
        """Write, read back and delete a probe object; StorageError with the cause if that fails.

        Call it before any expensive stage so an unreachable store is one clear error early.
        """
        key = f"_probe/{uuid.uuid4().hex}"
        try:  # any failure here (missing bucket, bad credentials, no network) is a set-up error
            self.write_bytes(key, b"ok")
            ok = self.read_bytes(key) == b"ok"
            self.delete(key)
        except Exception as exc:
            raise StorageError(f"object store {self.url()} is not usable: {exc!r}") from exc
        if not ok:
            raise StorageError(f"object store {self.url()} returned other bytes than written")

    # -- content-addressed blobs -------------------------------------------------------------

    def ensure_blob(self, data: bytes) -> tuple[str, bool]:
        """Store ``data`` by its sha256 unless already there: ``(digest, written)``.

        An existing object whose bytes are not ``data`` (torn or tampered, whatever its size)
        is rewritten.
        """
        digest = hashlib.sha256(data).hexdigest()
        key = blob_key(digest)
        self.fs.invalidate_cache(self._path(key))
        try:  # absent is the normal case for new content
            if self.read_bytes(key) == data:
                return digest, False
            logger.warning("blob %s does not hold its content; rewriting it", self.url(key))
        except ObjectMissingError:
            pass
        self.write_bytes(key, bytes(data))
        return digest, True

    def put_blob(self, data: bytes) -> str:
        """Store ``data`` content-addressed (idempotent) and return its sha256 hex digest."""
        return self.ensure_blob(data)[0]

    def has_blob(self, digest: str) -> bool:
        """Whether a blob with this digest is stored (not verified: see :meth:`get_blob`)."""
        return self.exists(blob_key(digest))

    def get_blob(self, digest: str) -> bytes:
        """The blob's bytes, verified; ObjectCorruptError if corrupt, ObjectMissingError (a
        FileNotFoundError) if absent."""
        data = self.read_bytes(blob_key(digest))
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise ObjectCorruptError(
                f"blob {self.url(blob_key(digest))} is corrupt: sha256 {actual}"
            )
        return data
