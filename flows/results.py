"""Task results as JSON that names only our own types, read only when they are.

Prefect persists each task's result (for caching and resume) as a record in the campaign's
store (``<storage.root>/prefect-results``). A pickle there would let whoever can write the bucket
run code on every worker that resumes; and a record names its own serializer, so Prefect would
unpickle a record that says "pickle" whatever the task asked for. Hence two locks:

- :class:`ResultSerializer` (type ``spade-json``) writes JSON; decoding rebuilds an object only
  for a class of :data:`ALLOWED_MODULES` (our dataclasses and pydantic models, a few stdlib
  value types), whatever the record says; its encoder, decoder and JSON library are fixed, not
  read from the record;
- the storage blocks here (:class:`ResultsFolder`, :class:`RemoteResults`) hand Prefect a record
  only if it names that serializer: any other record (a pickle, a foreign serializer, junk) is
  refused, which Prefect treats as a cache miss, so the task runs again and overwrites it.
"""

from __future__ import annotations

import json
import logging
from typing import Any, ClassVar, cast

from prefect._internal.compatibility.async_dispatch import async_dispatch
from prefect.filesystems import LocalFileSystem, RemoteFileSystem
from prefect.serializers import JSONSerializer, prefect_json_object_encoder
from prefect.utilities.importtools import from_qualified_name
from pydantic import Field, TypeAdapter

from spade.errors import StorageError

logger = logging.getLogger(__name__)

SERIALIZER = "spade-json"
ALLOWED_MODULES = ("spade", "flows", "pathlib", "datetime", "uuid", "decimal")
"""Top-level packages whose classes a result may name (exceptions: also ``builtins``)."""

_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def _allowed(name: Any, *, exception: bool = False) -> bool:
    if not isinstance(name, str):
        return False
    allowed = ALLOWED_MODULES + (("builtins",) if exception else ())
    return name.split(".", 1)[0] in allowed


def decode_object(obj: dict[str, Any]) -> Any:
    """``json`` object hook: Prefect's ``__class__`` / ``__exc_type__`` encoding, allow-listed.

    A class outside :data:`ALLOWED_MODULES` is refused (ValueError) before anything is
    imported; an exception of another package comes back as a RuntimeError with its text.
    """
    if "__class__" in obj:
        name = obj["__class__"]
        if not _allowed(name):
            raise ValueError(f"task result names class {name!r}: only {ALLOWED_MODULES} are read")
        if name not in _ADAPTERS:
            cls = from_qualified_name(name)
            if not isinstance(cls, type):
                raise ValueError(f"task result names {name!r}, which is not a class")
            _ADAPTERS[name] = TypeAdapter(cls)
        return _ADAPTERS[name].validate_python(obj.get("data"))
    if "__exc_type__" in obj:
        name, message = obj["__exc_type__"], str(obj.get("message", ""))
        if _allowed(name, exception=True):
            cls = from_qualified_name(name)
            if isinstance(cls, type) and issubclass(cls, Exception):
                return cls(message)
        return RuntimeError(f"{name}: {message}")
    return obj


class ResultSerializer(JSONSerializer[Any]):
    """JSON task results; only allow-listed classes are rebuilt (see the module docstring)."""

    type: str = Field(default=SERIALIZER, frozen=True)

    def dumps(self, obj: Any) -> bytes:
        return json.dumps(obj, default=prefect_json_object_encoder).encode()

    def loads(self, blob: bytes) -> Any:
        return json.loads(blob.decode(), object_hook=decode_object)


def check_record(content: bytes, where: str) -> bytes:
    """``content`` if it is a result record written by :class:`ResultSerializer`; a
    StorageError naming ``where`` otherwise (nothing in it is decoded)."""
    try:  # any shape that is not a JSON record naming our serializer is refused
        kind = json.loads(content)["metadata"]["serializer"]["type"]
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"task result {where} is not a JSON result record: {exc!r}") from exc
    if kind != SERIALIZER:
        raise StorageError(
            f"task result {where} names serializer {kind!r}; only {SERIALIZER!r} is read"
        )
    return content


class ResultsFolder(LocalFileSystem):
    """A local results folder that refuses records not written by :class:`ResultSerializer`."""

    _block_type_name: ClassVar[str] = "SPADE results folder"
    _block_type_slug: ClassVar[str] = "spade-results-folder"

    async def aread_path(self, path: str) -> bytes:
        return check_record(await LocalFileSystem.aread_path(self, path), path)

    @async_dispatch(aread_path)
    def read_path(self, path: str) -> bytes:  # type: ignore[override]
        content = LocalFileSystem.read_path(self, path, _sync=True)  # type: ignore[call-arg]
        return check_record(cast(bytes, content), path)


class RemoteResults(RemoteFileSystem):
    """Results on an fsspec URL (``s3://``) that refuses foreign records (as above)."""

    _block_type_name: ClassVar[str] = "SPADE remote results"
    _block_type_slug: ClassVar[str] = "spade-remote-results"

    async def aread_path(self, path: str) -> bytes:
        return check_record(await RemoteFileSystem.aread_path(self, path), path)

    @async_dispatch(aread_path)
    def read_path(self, path: str) -> bytes:  # type: ignore[override]
        content = RemoteFileSystem.read_path(self, path, _sync=True)  # type: ignore[call-arg]
        return check_record(cast(bytes, content), path)


__all__ = [
    "ALLOWED_MODULES",
    "SERIALIZER",
    "RemoteResults",
    "ResultSerializer",
    "ResultsFolder",
    "check_record",
    "decode_object",
]
