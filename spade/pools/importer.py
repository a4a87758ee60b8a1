"""``spade pool import``'s work: a published pool read (:mod:`spade.pools.sources`), every
environment verified in the jail in parallel, the accepted ones stored content-addressed as
stored pool ``<name>`` (:mod:`spade.curriculum.stored`), and a report of why the others failed.

What is written, in this order (the index last: an interrupted import leaves no new pool to
read, and a pool it replaces stays whole until its index is overwritten)::

    blobs/sha256/<aa>/<sha256>            each accepted source
    pools/<name>/verdicts/<sha256>.json   every verified environment's verdict
    pools/<name>/report.json              counts by failure kind, each rejection's reason
    pools/<name>/environments.jsonl       the accepted environments (the index)

Importing under a name again replaces that pool: once the new index is written, the old pool's
verdicts of environments the new one lacks are deleted (blobs stay, shared with every campaign
of the store).
"""

from __future__ import annotations

import math
import threading
import time
import tokenize
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from spade.config import VerifyConfig
from spade.config.pools import pool_ref
from spade.curriculum.memory import UNKNOWN_SKILL, read_declarations
from spade.curriculum.stored import INDEX, POOLS, REPORT, StoredEnv, index_bytes, pool_key
from spade.designer.designer import env_id_for
from spade.pools.sources import SourceEnv, read_source
from spade.pysource import PARSE_ERRORS
from spade.records import Verdict
from spade.sandbox.policy import SandboxPolicy
from spade.storage import ObjectStore
from spade.verify import Reference, verify
from spade.verify.novelty import source_tokens

DUPLICATE_SOURCE = "duplicate_source"
"""Rejection kind of a source identical to an earlier one of the pool (content-addressed, it is
that environment: kept once, never waivable)."""


@dataclass
class Rejection:
    """One environment that did not enter the pool, and why."""

    name: str
    sha256: str | None
    kind: str  # a verifier failure kind, or a source problem (checksum, missing, ...)
    check: str | None  # the verifier check that failed (None: rejected before verification)
    reason: str


@dataclass
class ImportReport:
    """What an import did: counts and reasons (``report.json``)."""

    pool: str
    source: str
    layout: str
    total: int
    accepted: int
    waive: list[str]
    by_kind: dict[str, int]
    waived: dict[str, int]  # accepted environments whose check failed but was waived
    rejections: list[Rejection] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rejected(self) -> int:
        return len(self.rejections)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"rejected": self.rejected}


def import_pool(
    source: str,
    store: ObjectStore,
    name: str,
    *,
    policy: SandboxPolicy,
    config: VerifyConfig | None = None,
    workers: int = 2,
    source_options: Mapping[str, Any] | None = None,
    references: Sequence[Reference] = (),
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Import the pool at ``source`` as stored pool ``name`` of ``store``.

    Args:
        config: the verifier's settings, ``waive`` included (default :class:`VerifyConfig`).
        workers: environments verified at once (each in its own jails).
        source_options: fsspec options for ``source`` (an S3 endpoint, credentials).
        references: environments the novelty check compares each one with (besides an
            earlier environment of the pool with the same normalised source, if any).
        progress: called with ``(verified, to verify)`` before the first verification and
            after each (from the worker threads).

    Raises:
        ValueError: ``name`` is malformed (see :func:`spade.config.pools.pool_ref`).
        ConfigError: nothing at ``source`` is a pool, or its own files are corrupt.
        SandboxError: the jail cannot run at all.
    """
    pool_ref(f"pool:{name}")  # ValueError for a malformed name, before any work
    t0 = time.perf_counter()
    cfg = config or VerifyConfig()
    found = read_source(source, source_options)
    rejections, todo = _screen(found.envs)
    verdicts = _verify_all(todo, cfg, policy, references, workers, progress)
    before = set(store.list(f"{POOLS}/{name}"))  # importing again replaces the pool
    accepted = []
    for env, verdict in zip(todo, verdicts, strict=True):
        assert env.code is not None and env.sha256 is not None
        row = verdict.to_dict() | {"name": env.name, "failed_check": verdict.failed_check}
        store.write_json(pool_key(name, f"verdicts/{env.sha256}.json"), row)
        if verdict.accepted:
            store.put_blob(env.code.encode())
            accepted.append(_stored(env, verdict))
        else:
            assert verdict.failure is not None
            failure = verdict.failure
            kind, check = str(failure.kind), verdict.failed_check
            rejections.append(Rejection(env.name, env.sha256, kind, check, failure.reason))
    report = ImportReport(
        pool=name,
        source=source,
        layout=found.layout,
        total=len(found.envs),
        accepted=len(accepted),
        waive=list(cfg.waive),
        by_kind=dict(Counter(r.kind for r in rejections).most_common()),
        waived=dict(Counter(c for e in accepted for c in e.waived)),
        rejections=rejections,
        seconds=time.perf_counter() - t0,
    )
    store.write_json(pool_key(name, REPORT), report.to_dict())
    store.write_bytes(pool_key(name, INDEX), index_bytes(accepted))  # the new pool, whole
    written = {pool_key(name, f"verdicts/{env.sha256}.json") for env in todo}
    for stale in sorted(before - written - {pool_key(name, REPORT), pool_key(name, INDEX)}):
        store.delete(stale)  # the replaced pool's verdicts of environments no longer in it
    return report


def _verify_all(
    todo: list[SourceEnv],
    cfg: VerifyConfig,
    policy: SandboxPolicy,
    references: Sequence[Reference],
    workers: int,
    progress: Callable[[int, int], None] | None,
) -> list[Verdict]:
    """The verdicts of ``todo``, in order, ``workers`` at a time (each verification runs its
    own jails; the threads only wait on them)."""
    copies = _lookalikes(todo, cfg.similarity_max_tokens)
    done, lock = [0], threading.Lock()
    if progress is not None:
        progress(0, len(todo))

    def one(env: SourceEnv) -> Verdict:
        assert env.code is not None
        refs = [*references, *copies.get(str(env.sha256), [])]
        verdict = verify(env.code, config=cfg, policy=policy, references=refs)
        with lock:
            done[0] += 1
            if progress is not None:
                progress(done[0], len(todo))
        return verdict

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, todo))


def _screen(envs: list[SourceEnv]) -> tuple[list[Rejection], list[SourceEnv]]:
    """Rejections found before verification (source problems, repeated sources), and the
    environments left to verify, in order."""
    rejections: list[Rejection] = []
    todo: list[SourceEnv] = []
    first: dict[str, str] = {}
    for env in envs:
        if env.problem is not None:
            rejections.append(Rejection(env.name, env.sha256, env.problem, None, env.reason or ""))
        elif (sha := env.sha256) in first:
            why = f"the same source as {first[sha]!r}"
            rejections.append(Rejection(env.name, sha, DUPLICATE_SOURCE, None, why))
        else:
            assert sha is not None
            first[sha] = env.name
            todo.append(env)
    return rejections, todo


def _lookalikes(todo: list[SourceEnv], max_tokens: int) -> dict[str, list[Reference]]:
    """Per environment (by sha256: names may repeat), the earlier environment of the pool whose
    normalised source (:func:`spade.verify.novelty.source_tokens`: no comments, docstrings or
    layout, its own names one placeholder) is the same: a renamed or re-commented copy. It
    becomes a novelty reference, so the copy fails ``novelty`` as a duplicate (waivable,
    reported) while the first stays. Linear in the pool's size; copies that differ in a few
    tokens are not found this way (only against ``references``)."""
    first: dict[tuple[str, ...], SourceEnv] = {}
    out: dict[str, list[Reference]] = {}
    for env in todo:
        assert env.code is not None
        try:  # code that does not parse fails the parse check; nothing to compare here
            key = tuple(source_tokens(env.code, max_tokens))
        except (*PARSE_ERRORS, tokenize.TokenError):
            continue
        if (earlier := first.setdefault(key, env)) is not env:
            assert earlier.code is not None
            out[str(env.sha256)] = [Reference(earlier.name, earlier.code)]
    return out


def _stored(env: SourceEnv, verdict: Verdict) -> StoredEnv:
    """The index row of an accepted environment: skill and hint from the pool's metadata, else
    the class's declarations (as the verifier read them in the jail)."""
    assert env.code is not None and env.sha256 is not None
    declared = read_declarations(env.code)
    skill = env.meta.get("skill") or verdict.skill or declared.get("skill") or UNKNOWN_SKILL
    hint = env.meta.get("hint") or verdict.hint or declared.get("hint")
    meta = {k: v for k, v in env.meta.items() if _plain(v)}
    return StoredEnv(
        name=env.name,
        sha256=env.sha256,
        env_id=env_id_for(env.code),
        skill=str(skill),
        hint=None if hint is None else str(hint),
        tool_use=verdict.tool_use,
        waived=verdict.waived,
        meta=meta,
    )


def _plain(value: object) -> bool:
    """Whether a metadata value is JSON as it is (scalars, lists and objects of them)."""
    if isinstance(value, float):
        return math.isfinite(value)  # the store writes strict JSON: no NaN (parquet nulls)
    if value is None or isinstance(value, str | int | bool):
        return True
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


__all__ = ["DUPLICATE_SOURCE", "ImportReport", "Rejection", "import_pool"]
