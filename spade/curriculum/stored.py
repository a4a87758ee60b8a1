"""Environment pools stored in the object store (what ``spade pool import`` writes): their keys,
their index and reading them back.

Layout (keys relative to the store root; code is content-addressed and shared)::

    blobs/sha256/<aa>/<sha256>            an environment's source (sha256 of its UTF-8 bytes)
    pools/<name>/environments.jsonl       the accepted environments, one row each (the index)
    pools/<name>/verdicts/<sha256>.json   every verified environment's verdict (rejected too)
    pools/<name>/report.json              the import's report: counts by failure kind, reasons

A campaign names a stored pool as ``pool:<name>`` (``run.env_pool``, ``memory.seed_pool``),
read from its own ``storage.root``. Reading verifies every source against its sha256
(:meth:`ObjectStore.get_blob`): a pool that changed under a campaign fails loudly.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from spade.errors import ConfigError, ObjectCorruptError, ObjectMissingError
from spade.storage import ObjectStore

if TYPE_CHECKING:  # only read here; keeps this module free of pydantic at import
    from spade.config import StorageConfig

POOLS = "pools"
INDEX = "environments.jsonl"
REPORT = "report.json"


@dataclass(frozen=True)
class StoredEnv:
    """One accepted environment of a stored pool (its code is the blob ``sha256``)."""

    name: str  # its name in the source (a file stem such as game_0001, or a row's id)
    sha256: str
    env_id: str
    skill: str
    hint: str | None = None
    tool_use: bool = False
    waived: list[str] = field(default_factory=list)  # checks it failed, waived at import
    meta: dict[str, Any] = field(default_factory=dict)  # the source's own fields (win_rate, ...)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pool_key(name: str, rest: str) -> str:
    """The key of ``rest`` in stored pool ``name`` (validated as ``pool:<name>`` is)."""
    from spade.config.pools import pool_ref  # lazy: importing spade.config loads pydantic

    return f"{POOLS}/{pool_ref(f'pool:{name}')}/{rest}"


def index_bytes(envs: list[StoredEnv]) -> bytes:
    """The index as stored: one JSON object per line, sorted keys."""
    return b"".join(json.dumps(e.to_dict(), sort_keys=True).encode() + b"\n" for e in envs)


def read_index(store: ObjectStore, name: str) -> list[StoredEnv]:
    """The accepted environments of stored pool ``name``, in import order.

    Raises:
        ConfigError: no pool of that name in the store (with where it looked).
        ObjectCorruptError: the index is not what ``spade pool import`` writes.
    """
    key = pool_key(name, INDEX)
    data = _index_data(store, name)
    envs = []
    for lineno, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        try:  # a torn or hand-edited index is the store's fault: say which line
            envs.append(StoredEnv(**json.loads(line)))
        except (ValueError, TypeError) as exc:
            raise ObjectCorruptError(f"{store.url(key)}:{lineno}: {exc}") from exc
    return envs


def _index_data(store: ObjectStore, name: str) -> bytes:
    try:  # absent: the user named a pool that was never imported here
        return store.read_bytes(pool_key(name, INDEX))
    except ObjectMissingError:
        raise ConfigError(
            f"no environment pool {name!r} in {store.url()} (import it with `spade pool import`)"
        ) from None


def store_for(entries: Iterable[str], storage: StorageConfig) -> ObjectStore | None:
    """The store the ``pool:<name>`` entries among ``entries`` (paths otherwise) are read
    from: the campaign's own (``storage``); None when every entry is a path."""
    from spade.config.pools import pool_ref  # lazy: importing spade.config loads pydantic

    if any(pool_ref(entry) is not None for entry in entries):
        return ObjectStore.from_config(storage)
    return None


def read_pool(store: ObjectStore, name: str) -> list[tuple[StoredEnv, str]]:
    """Every accepted environment of stored pool ``name`` with its source (verified by hash)."""
    return [(e, store.get_blob(e.sha256).decode("utf-8")) for e in read_index(store, name)]


def pool_digest(store: ObjectStore, name: str) -> str:
    """A digest of the pool's index (which names every source by its sha256): what a cache key
    holds, so a re-imported pool with other environments is another input."""
    return hashlib.sha256(_index_data(store, name)).hexdigest()


__all__ = [
    "INDEX",
    "POOLS",
    "REPORT",
    "StoredEnv",
    "index_bytes",
    "pool_digest",
    "pool_key",
    "read_index",
    "read_pool",
    "store_for",
]
