"""The environment memory: a bounded FIFO of past designs that conditions the next ones.

DESIGN.md §2.2 and §2.7. Each record keeps a design's id, skill, the head of its code, its
unhinted win rate and regret and the round it came from. The designer's prompt shows examples
from it (:meth:`EnvironmentMemory.examples_for`): *positives* of the same skill whose win rate
lies in a band, drawn from the top by regret, and *negatives* that were too easy or too hard.
Designs seeded from a pool have no win rate until played: they fill the positive slots that
played designs of the skill leave empty, and are never negatives. The memory is persisted with
:meth:`~EnvironmentMemory.state_dict` and restored on resume, and seeded from an existing
environment pool with :func:`import_pool` (which reads the pool's code as text: it is untrusted
and is never imported or executed here).
"""

from __future__ import annotations

import ast
import json
import math
import random
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # only attributes are read; keeps this module free of pydantic at import
    from spade.config import DesignerConfig, MemoryConfig

STATE_VERSION = 1
SEED_ROUND = -1
"""``round`` of records imported from a pool: they come from before round 0."""
UNKNOWN_SKILL = "unknown"
"""``skill`` of imported designs that name none (never a positive of a real skill)."""
CODE_FIELDS = ("code", "env_code", "source")
ID_FIELDS = ("env_id", "id")
NegativeLabel = Literal["too easy", "too hard"]


@dataclass(frozen=True)
class MemoryRecord:
    """One remembered design.

    Attributes:
        env_id: the design's id.
        skill: the skill it was designed for.
        code_head: the first ``MemoryConfig.code_head_chars`` characters of its code.
        win_rate: unhinted win rate in [0, 1]; None if never evaluated (then at most a positive
            example, after the scored ones: see :meth:`EnvironmentMemory.examples_for`).
        regret: regret estimate ``>= 0``; None if never evaluated.
        round: the round that produced it (-1 for designs seeded from a pool).
        hint: the strategy hint written for it, if any.
        accepted: whether it passed verification.
    """

    env_id: str
    skill: str
    code_head: str
    win_rate: float | None = None
    regret: float | None = None
    round: int = 0
    hint: str | None = None
    accepted: bool = True

    def __post_init__(self) -> None:
        if self.win_rate is not None and not 0.0 <= self.win_rate <= 1.0:
            raise ValueError(f"record {self.env_id!r}: win_rate must be in [0, 1]")
        if self.regret is not None and not math.isfinite(self.regret):
            raise ValueError(f"record {self.env_id!r}: regret must be finite")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryRecord:
        """Rebuild a record from :func:`dataclasses.asdict` output; unknown keys are errors."""
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"memory record has unknown fields: {sorted(unknown)}")
        try:
            return cls(**data)
        except TypeError as exc:  # a required field is missing
            raise ValueError(f"bad memory record {data.get('env_id')!r}: {exc}") from exc


def negative_label(record: MemoryRecord, designer: DesignerConfig) -> NegativeLabel:
    """``"too easy"`` above ``too_easy_win_rate``, ``"too hard"`` below ``too_hard_win_rate``."""
    if record.win_rate is not None and record.win_rate > designer.too_easy_win_rate:
        return "too easy"
    if record.win_rate is not None and record.win_rate < designer.too_hard_win_rate:
        return "too hard"
    raise ValueError(f"record {record.env_id!r} (win rate {record.win_rate}) is not a negative")


def _by_regret(records: Iterable[MemoryRecord]) -> list[MemoryRecord]:
    # Highest regret first; an unknown regret ranks last. sorted() is stable, so equal regrets
    # keep the order given (callers pass newest first: recent designs win ties).
    return sorted(records, key=lambda r: -r.regret if r.regret is not None else math.inf)


class EnvironmentMemory:
    """FIFO of at most ``config.capacity`` :class:`MemoryRecord` (the oldest drop out first)."""

    def __init__(self, config: MemoryConfig) -> None:
        self.config = config
        self._records: deque[MemoryRecord] = deque(maxlen=config.capacity)

    def __len__(self) -> int:
        return len(self._records)

    def add(self, record: MemoryRecord) -> None:
        """Append ``record``, cutting its code to ``code_head_chars``; may evict the oldest.
        A record of an environment already remembered replaces it (a replay round measures
        the same environment again: the newest win rate and regret count, once)."""
        head = record.code_head[: self.config.code_head_chars]
        if head != record.code_head:
            record = replace(record, code_head=head)
        if any(r.env_id == record.env_id for r in self._records):
            self._records = deque(
                (r for r in self._records if r.env_id != record.env_id), maxlen=self._records.maxlen
            )
        self._records.append(record)

    def extend(self, records: Iterable[MemoryRecord]) -> None:
        """:meth:`add` each record in order."""
        for record in records:
            self.add(record)

    def records(self) -> list[MemoryRecord]:
        """All records, oldest first."""
        return list(self._records)

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: ``{"version", "capacity", "records": [dict, ...]}``."""
        return {
            "version": STATE_VERSION,
            "capacity": self.config.capacity,
            "records": [asdict(r) for r in self._records],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the contents with ``state``'s records (the newest ``capacity`` if more)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"memory state version {state.get('version')!r} unsupported "
                f"(expected {STATE_VERSION})"
            )
        records = state.get("records")
        if not isinstance(records, list):
            raise ValueError("memory state needs a 'records' list")
        self._records.clear()
        self.extend(MemoryRecord.from_dict(r) for r in records)

    def examples_for(
        self, skill: str, rng: random.Random, designer: DesignerConfig
    ) -> tuple[list[MemoryRecord], list[MemoryRecord]]:
        """Prompt examples for a design of ``skill``: ``(positives, negatives)``.

        Only accepted records take part. *Scored* records (with a win rate) are the examples of
        DESIGN.md §2.2; *unscored* ones (no win rate: designs seeded from a pool by
        :func:`import_pool` that nobody has played yet) only fill positive slots.

        - positives: up to ``designer.positives`` (k) records of ``skill``. Scored records whose
          win rate is in ``designer.positive_win_rate`` (inclusive) come first: "drawn from the
          top by regret", the top ``2k`` by regret (ties: newest first) are the candidates, k of
          them are sampled with ``rng`` — variety across prompts, still high regret — and
          returned by regret, highest first. Slots they leave empty are filled with unscored
          records of ``skill``, sampled with ``rng`` and placed after the scored ones: a seeded
          pool conditions the first designs of a skill, and gives way as soon as the campaign
          has played enough designs of that skill for the band.
        - negatives: up to ``designer.negatives`` scored records of any skill that were too
          easy (win rate > ``too_easy_win_rate``) or too hard (< ``too_hard_win_rate``);
          records of ``skill`` are preferred (taken first, sampled with ``rng`` if there are
          more), the rest are sampled from other skills. Label them with
          :func:`negative_label`. Unscored records are never negatives: nothing says they were
          too easy or too hard.
        """
        newest_first = [r for r in reversed(self._records) if r.accepted]
        scored = [r for r in newest_first if r.win_rate is not None]
        unscored = [r for r in newest_first if r.win_rate is None and r.skill == skill]
        positives = self._positives(scored, skill, rng, designer)
        negatives = self._negatives(scored, skill, rng, designer)
        # filled last, so unscored records never change which scored examples are drawn
        missing = designer.positives - len(positives)
        positives += rng.sample(unscored, min(missing, len(unscored)))
        return positives, negatives

    @staticmethod
    def _positives(
        records: Sequence[MemoryRecord], skill: str, rng: random.Random, designer: DesignerConfig
    ) -> list[MemoryRecord]:
        k = designer.positives
        lo, hi = designer.positive_win_rate
        # win_rate is never None here (only scored records); `or 0.0` only narrows the type
        band = [r for r in records if r.skill == skill and lo <= (r.win_rate or 0.0) <= hi]
        candidates = _by_regret(band)[: 2 * k]
        return _by_regret(rng.sample(candidates, min(k, len(candidates))))

    @staticmethod
    def _negatives(
        records: Sequence[MemoryRecord], skill: str, rng: random.Random, designer: DesignerConfig
    ) -> list[MemoryRecord]:
        k = designer.negatives
        easy, hard = designer.too_easy_win_rate, designer.too_hard_win_rate
        bad = [r for r in records if not hard <= (r.win_rate or 0.0) <= easy]
        same = [r for r in bad if r.skill == skill]
        other = [r for r in bad if r.skill != skill]
        chosen = rng.sample(same, min(k, len(same)))
        return chosen + rng.sample(other, min(k - len(chosen), len(other)))


# ---------------------------------------------------------------- seeding from a pool


def _string_attrs(body: Iterable[ast.stmt]) -> dict[str, str]:
    """``name = "literal"`` (or ``name: str = ...``) assignments among ``body``'s statements."""
    found: dict[str, str] = {}
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if (
            isinstance(target, ast.Name)
            and isinstance(value, ast.Constant)
            and isinstance(value.value, str)
        ):
            found.setdefault(target.id, value.value)
    return found


_SKILL_LINE = re.compile(r"""^[ \t]*skill[ \t]*(?::[^=\n]*)?=[ \t]*(['"])(.+?)\1""", re.M)


def read_declarations(code: str) -> dict[str, str]:
    """The ``skill`` and ``hint`` strings an environment's source declares, read without running it.

    Module level first, then classes whose name ends in ``Env``, then other classes; the first
    value found wins. Unparseable code falls back to a line regex for ``skill`` alone.

    Returns:
        A dict with some of the keys ``"skill"``, ``"hint"``.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):  # broken designs are still worth remembering
        match = _SKILL_LINE.search(code)
        return {"skill": match.group(2)} if match else {}
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    classes.sort(key=lambda c: not c.name.endswith("Env"))  # stable: file order otherwise
    found: dict[str, str] = {}
    for body in [tree.body, *(c.body for c in classes)]:
        for key, value in _string_attrs(body).items():
            found.setdefault(key, value)
    return {k: v for k, v in found.items() if k in ("skill", "hint")}


def _record_from_code(
    env_id: str, code: str, config: MemoryConfig, extra: dict[str, Any]
) -> MemoryRecord:
    declared = read_declarations(code)
    return MemoryRecord(
        env_id=env_id,
        skill=extra.get("skill") or declared.get("skill") or UNKNOWN_SKILL,
        code_head=code[: config.code_head_chars],
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


def _jsonl_record(raw: object, where: str, config: MemoryConfig) -> MemoryRecord:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: a record must be a JSON object, got {type(raw).__name__}")
    code = next((raw[f] for f in CODE_FIELDS if isinstance(raw.get(f), str) and raw[f]), None)
    if code is None:
        raise ValueError(f"{where}: record has no code (a non-empty {' / '.join(CODE_FIELDS)})")
    extra: dict[str, Any] = {}
    for key, types in _OPTIONAL_TYPES.items():
        value = raw.get(key)
        if value is None:
            continue
        # bool is an int in Python: keep true/false out of the numeric fields and vice versa
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ValueError(f"{where}: field {key!r} has the wrong type: {value!r}")
        extra[key] = value
    env_id = next((raw[f] for f in ID_FIELDS if isinstance(raw.get(f), str | int)), None)
    try:
        return _record_from_code(where if env_id is None else str(env_id), code, config, extra)
    except ValueError as exc:  # the record's own checks: say which line
        raise ValueError(f"{where}: {exc}") from exc


def _read_jsonl(pool: Path, config: MemoryConfig) -> list[MemoryRecord]:
    records = []
    for lineno, line in enumerate(pool.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{pool.name}:{lineno}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not valid JSON: {exc}") from exc
        records.append(_jsonl_record(raw, where, config))
    return records


def import_pool(path: str | Path, config: MemoryConfig) -> list[MemoryRecord]:
    """Memory records seeded from an existing environment pool (code read as text, never run).

    Args:
        path: a folder of ``.py`` files (``__init__.py`` skipped; ``env_id`` is the file stem),
            a single ``.py`` file, or a JSONL file whose records hold the code in ``code``,
            ``env_code`` or ``source`` and optionally ``skill``, ``win_rate``, ``regret``,
            ``hint``, ``round``, ``accepted`` and ``env_id`` / ``id`` (default ``file:line``).
        config: gives ``code_head_chars``.

    Returns:
        Records in file order (folders: sorted by name) with ``round`` = :data:`SEED_ROUND`
        unless given. ``skill`` and ``hint`` missing from a record are read from the code's
        ``skill = "..."`` / ``hint = "..."`` declarations (module or class level, via
        :func:`read_declarations`), else ``skill`` is :data:`UNKNOWN_SKILL`. Records without a
        ``win_rate`` (every ``.py`` one) are unscored: they fill positive prompt slots of their
        skill until played designs take them (:meth:`EnvironmentMemory.examples_for`).

    Raises:
        ValueError: the path is missing, holds no environments, or a record is malformed.
    """
    pool = Path(path)
    if not pool.exists():
        raise ValueError(f"environment pool {pool} does not exist")
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
        raise ValueError(f"environment pool {pool} holds no environments")
    return records
