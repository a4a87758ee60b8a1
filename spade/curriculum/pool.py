"""Seeding the environment memory from an existing pool of environments.

:func:`import_pool` reads a pool (a folder of ``.py`` files, one file, JSONL, or ``pool:<name>``:
a pool ``spade pool import`` verified and stored, :mod:`spade.curriculum.stored`) as text: its
code is untrusted and is never imported or executed here. :func:`seed_records` is what a
campaign's memory starts from: the configured pool (or, for the edit strategy, the bundled
examples), less the held-out environments.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade.curriculum.memory import SEED_ROUND, UNKNOWN_SKILL, MemoryRecord, read_declarations
from spade.curriculum.stored import read_pool, store_for
from spade.envs.examples import example_paths
from spade.errors import ConfigError, ConfigValueError
from spade.storage import ObjectStore

if TYPE_CHECKING:  # only attributes are read; keeps this module free of pydantic at import
    from spade.config import CampaignConfig, MemoryConfig

CODE_FIELDS = ("code", "env_code", "source")
ID_FIELDS = ("env_id", "id")


def _record_from_code(
    env_id: str, code: str, config: MemoryConfig, extra: dict[str, Any]
) -> MemoryRecord:
    declared = read_declarations(code)
    return MemoryRecord(
        env_id=env_id,
        skill=extra.get("skill") or declared.get("skill") or UNKNOWN_SKILL,
        code_head=code[: config.code_head_chars],
        code_chars=len(code),
        win_rate=extra.get("win_rate"),
        regret=extra.get("regret"),
        round=extra.get("round", SEED_ROUND),
        hint=extra.get("hint") or declared.get("hint"),
        accepted=extra.get("accepted", True),
    )


_OPTIONAL_TYPES: dict[str, tuple[type, ...]] = {
    "skill": (str,),
    "hint": (str,),
    "win_rate": (int, float),
    "regret": (int, float),
    "round": (int,),
    "accepted": (bool,),
}


def code_of(row: Mapping[str, Any]) -> str | None:
    """An environment row's code: its first non-empty string of :data:`CODE_FIELDS`."""
    return next((row[f] for f in CODE_FIELDS if isinstance(row.get(f), str) and row[f]), None)


def jsonl_objects(text: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    """The JSON objects of JSONL ``text`` (blank lines skipped), each with where it stands
    (``name:line``); ConfigValueError naming the line that is not a JSON object."""
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        try:  # a malformed line is the pool's error: name it
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigValueError(f"{where}: not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ConfigValueError(
                f"{where}: a record must be a JSON object, got {type(raw).__name__}"
            )
        rows.append((where, raw))
    return rows


def _jsonl_record(raw: dict[str, Any], where: str, config: MemoryConfig) -> MemoryRecord:
    code = code_of(raw)
    if code is None:
        raise ConfigValueError(
            f"{where}: record has no code (a non-empty {' / '.join(CODE_FIELDS)})"
        )
    extra: dict[str, Any] = {}
    for key, types in _OPTIONAL_TYPES.items():
        value = raw.get(key)
        if value is None:
            continue
        # bool is an int in Python: keep true/false out of the numeric fields and vice versa
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ConfigValueError(f"{where}: field {key!r} has the wrong type: {value!r}")
        extra[key] = value
    env_id = next((raw[f] for f in ID_FIELDS if isinstance(raw.get(f), str | int)), None)
    try:
        return _record_from_code(where if env_id is None else str(env_id), code, config, extra)
    except ValueError as exc:  # the record's own checks: say which line
        raise ConfigValueError(f"{where}: {exc}") from exc


def _read_jsonl(pool: Path, config: MemoryConfig) -> list[MemoryRecord]:
    rows = jsonl_objects(pool.read_text(encoding="utf-8"), pool.name)
    return [_jsonl_record(raw, where, config) for where, raw in rows]


def _stored_records(
    store: ObjectStore | None, name: str, config: MemoryConfig
) -> list[MemoryRecord]:
    """Records of stored pool ``name``: its skill, hint and the source's own scores, if any
    (an exported campaign's win rates and regrets)."""
    if store is None:
        raise ConfigValueError(f"pool:{name} names a stored pool: reading it needs the store")
    records = []
    for env, code in read_pool(store, name):
        extra: dict[str, Any] = {"skill": env.skill, "hint": env.hint}
        for key in ("win_rate", "regret"):
            value = env.meta.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                extra[key] = value
        records.append(_record_from_code(env.name, code, config, extra))
    return records


def import_pool(
    path: str | Path, config: MemoryConfig, store: ObjectStore | None = None
) -> list[MemoryRecord]:
    """Memory records seeded from an existing environment pool (code read as text, never run).

    Args:
        path: a folder of ``.py`` files (``__init__.py`` skipped; ``env_id`` is the file stem),
            a single ``.py`` file, or a JSONL file whose records hold the code in ``code``,
            ``env_code`` or ``source`` and optionally ``skill``, ``win_rate``, ``regret``,
            ``hint``, ``round``, ``accepted`` and ``env_id`` / ``id`` (default ``file:line``);
            or ``pool:<name>``, a stored pool's accepted environments (in ``store``).
        config: gives ``code_head_chars``.
        store: the object store a ``pool:<name>`` is read from.

    Returns:
        Records in file order (folders: sorted by name) with ``round`` = :data:`SEED_ROUND`
        unless given. ``skill`` and ``hint`` missing from a record are read from the code's
        ``skill = "..."`` / ``hint = "..."`` declarations (module or class level, via
        :func:`read_declarations`), else ``skill`` is :data:`UNKNOWN_SKILL`. Records without a
        ``win_rate`` (every ``.py`` one) are unscored: they fill positive prompt slots of their
        skill until played designs take them (:meth:`EnvironmentMemory.examples_for`).

    Raises:
        ConfigValueError (a ValueError): the path is missing, holds no environments, or a
            record is malformed.
    """
    from spade.config.pools import pool_ref  # lazy: importing spade.config loads pydantic

    if (name := pool_ref(str(path))) is not None:
        records = _stored_records(store, name, config)
        if not records:
            raise ConfigValueError(f"environment pool {path} holds no environments")
        return records
    pool = Path(path)
    if not pool.exists():
        raise ConfigValueError(f"environment pool {pool} does not exist")
    if pool.is_dir():
        files = sorted(p for p in pool.glob("*.py") if p.name != "__init__.py")
        records = [
            _record_from_code(p.stem, p.read_text(encoding="utf-8"), config, {}) for p in files
        ]
    elif pool.suffix == ".py":
        records = [_record_from_code(pool.stem, pool.read_text(encoding="utf-8"), config, {})]
    else:
        records = _read_jsonl(pool, config)
    if not records:
        raise ConfigValueError(f"environment pool {pool} holds no environments")
    return records


def seed_records(cfg: CampaignConfig) -> list[MemoryRecord]:
    """The records a campaign's memory starts from: :func:`import_pool` of ``memory.seed_pool``
    (unset, with ``designer.strategy`` edit or splice: the bundled examples,
    :mod:`spade.envs.examples`), less the environments of ``run.heldout_envs``, matched by
    code: a held-out environment is never shown to the designer, whatever pool holds it."""
    pool = cfg.memory.seed_pool
    if pool is None and cfg.designer.strategy in ("edit", "splice"):
        pool = str(example_paths()[0].parent)
    if pool is None:
        return []
    held_out = {
        path.read_text(encoding="utf-8")[: cfg.memory.code_head_chars].strip()
        for path in env_files(cfg.run.heldout_envs, "run.heldout_envs")
    }
    records = import_pool(pool, cfg.memory, store_for([pool], cfg.storage))
    return [r for r in records if r.code_head.strip() not in held_out]


def env_files(entries: Iterable[str | Path], setting: str) -> list[Path]:
    """Environment files named by ``entries`` (files, or folders: their ``*.py`` but
    ``_private.py``, sorted), in order; ConfigError naming ``setting`` for a missing path.

    Used for run.heldout_envs (the heldout stage, and here: a missing held-out path would leave
    nothing out, and a held-out environment, e.g. a relative path read from another working
    directory, would be shown to the designer) and for run.env_pool."""
    files: list[Path] = []
    for entry in entries:
        path = Path(entry).expanduser()
        if path.is_dir():
            files += sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(
                f"{setting}: {str(entry)!r} is neither a file nor a folder (from {Path.cwd()})"
            )
    return files
