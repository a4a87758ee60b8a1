"""The environment memory: a bounded FIFO of past designs that conditions the next ones.

docs/architecture.md §2.2 and §2.8. Each record keeps a design's id, skill, its code (whole, up to
``MemoryConfig.code_head_chars``), its unhinted win rate and regret and the round it came from.
The designer's prompt shows examples from it (:meth:`EnvironmentMemory.examples_for`):
*positives* of the same skill whose win rate lies in a band, drawn from the top by regret, and
*negatives* that were too easy or too hard; the edit strategy takes a *parent* from it
(:meth:`EnvironmentMemory.parent_for`). Only whole code that fits the prompt's budget
(``DesignerConfig.max_example_chars``) is ever shown: a class cut in the middle is what a small
model copies. Designs seeded from a pool have no win rate until played: they fill the positive
slots that played designs of the skill leave empty, and are never negatives. The memory is
persisted with :meth:`~EnvironmentMemory.state_dict` and restored on resume, and seeded from an
existing environment pool by :mod:`spade.curriculum.pool`.
"""

from __future__ import annotations

import ast
import math
import random
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal

from spade.errors import ObjectCorruptError
from spade.pysource import PARSE_ERRORS, parse_module

if TYPE_CHECKING:  # only attributes are read; keeps this module free of pydantic at import
    from spade.config import DesignerConfig, MemoryConfig

STATE_VERSION = 2
"""Version 2 added ``code_chars``; version-1 states still load (their records' code is of
unknown completeness, so they are never shown in a prompt)."""
READABLE_VERSIONS = (1, STATE_VERSION)
SEED_ROUND = -1
"""``round`` of records imported from a pool: they come from before round 0."""
UNKNOWN_SKILL = "unknown"
"""``skill`` of imported designs that name none (never a positive of a real skill)."""
NegativeLabel = Literal["too easy", "too hard"]


@dataclass(frozen=True)
class MemoryRecord:
    """One remembered design.

    Attributes:
        env_id: the design's id.
        skill: the skill it was designed for.
        code_head: its code, cut to ``MemoryConfig.code_head_chars`` characters if longer.
        win_rate: unhinted win rate in [0, 1]; None if never evaluated (then at most a positive
            example, after the scored ones: see :meth:`EnvironmentMemory.examples_for`).
        regret: regret estimate ``>= 0``; None if never evaluated.
        round: the round that produced it (-1 for designs seeded from a pool).
        hint: the strategy hint written for it, if any.
        accepted: whether it passed verification.
        code_chars: the length of the whole code: ``code_head`` is whole when they are equal.
            None: not known (a record of a version-1 state; never shown in a prompt). A record
            added to a memory without it is taken as whole (:meth:`EnvironmentMemory.add`).
        mean_return: mean unhinted return of its plays (partial credit counts); None if never
            evaluated (or stored before it was kept).
        parent_id: the design it varies (edit, splice), if any: a parent whose variants all
            scored 0 on every play is drawn less (:meth:`EnvironmentMemory.parent_for`).
    """

    env_id: str
    skill: str
    code_head: str
    win_rate: float | None = None
    regret: float | None = None
    round: int = 0
    hint: str | None = None
    accepted: bool = True
    code_chars: int | None = None
    mean_return: float | None = None
    parent_id: str | None = None

    def __post_init__(self) -> None:
        if self.win_rate is not None and not 0.0 <= self.win_rate <= 1.0:
            raise ValueError(f"record {self.env_id!r}: win_rate must be in [0, 1]")
        if self.regret is not None and not math.isfinite(self.regret):
            raise ValueError(f"record {self.env_id!r}: regret must be finite")
        if self.code_chars is not None and self.code_chars < len(self.code_head):
            raise ValueError(f"record {self.env_id!r}: code_chars is less than the code's length")

    @property
    def whole_code(self) -> str | None:
        """The design's whole code, or None if the record holds only a cut (or unknown) head."""
        return self.code_head if self.code_chars == len(self.code_head) else None

    def shown_whole(self, max_chars: int) -> bool:
        """Whether a prompt may show this design: accepted, whole, at most ``max_chars``."""
        return self.accepted and self.whole_code is not None and len(self.code_head) <= max_chars

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryRecord:
        """Rebuild a record from :func:`dataclasses.asdict` output (as stored); unknown keys,
        missing or bad values are ObjectCorruptError (a ValueError)."""
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ObjectCorruptError(f"memory record has unknown fields: {sorted(unknown)}")
        try:  # a required field is missing (TypeError) or a value out of range (ValueError)
            return cls(**data)
        except (TypeError, ValueError) as exc:
            raise ObjectCorruptError(f"bad memory record {data.get('env_id')!r}: {exc}") from exc


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
        A record without ``code_chars`` is a new design whose code is whole. A record of an
        environment already remembered replaces it (a replay round measures the same
        environment again: the newest win rate and regret count, once)."""
        if record.code_chars is None:
            record = replace(record, code_chars=len(record.code_head))
        self._put(record)

    def _put(self, record: MemoryRecord) -> None:
        head = record.code_head[: self.config.code_head_chars]
        if head != record.code_head:  # code_chars keeps the whole length: marked as cut
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
        if state.get("version") not in READABLE_VERSIONS:
            raise ObjectCorruptError(
                f"memory state version {state.get('version')!r} unsupported "
                f"(expected one of {READABLE_VERSIONS})"
            )
        records = state.get("records")
        if not isinstance(records, list):
            raise ObjectCorruptError("memory state needs a 'records' list")
        self._records.clear()
        for r in records:  # not add(): a record without code_chars stays of unknown length
            self._put(MemoryRecord.from_dict(r))

    def examples_for(
        self, skill: str, rng: random.Random, designer: DesignerConfig
    ) -> tuple[list[MemoryRecord], list[MemoryRecord]]:
        """Prompt examples for a design of ``skill``: ``(positives, negatives)``.

        Only accepted records whose whole code fits ``designer.max_example_chars`` take part
        (:meth:`MemoryRecord.shown_whole`: longer ones are skipped, never cut). *Scored*
        records (with a win rate) are the examples of docs/architecture.md §2.2; *unscored* ones (no
        win rate: designs seeded from a pool that nobody has played yet) only fill positive slots.

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
        newest_first = self._showable(designer)
        scored = [r for r in newest_first if r.win_rate is not None]
        unscored = [r for r in newest_first if r.win_rate is None and r.skill == skill]
        positives = self._positives(scored, skill, rng, designer)
        negatives = self._negatives(scored, skill, rng, designer)
        # filled last, so unscored records never change which scored examples are drawn
        missing = designer.positives - len(positives)
        positives += rng.sample(unscored, min(missing, len(unscored)))
        return positives, negatives

    def _showable(self, designer: DesignerConfig) -> list[MemoryRecord]:
        """Records a prompt may show, newest first."""
        return [r for r in reversed(self._records) if r.shown_whole(designer.max_example_chars)]

    def parent_for(
        self, skill: str, rng: random.Random, designer: DesignerConfig
    ) -> MemoryRecord | None:
        """The environment an edit-strategy design mutates (ACCEL's level editing), or None.

        Candidates are the records a prompt may show (:meth:`_showable`) of the designer's mode
        (a skill of ``designer.skills``; an imported design of unknown skill by its base class)
        that are not negatives (unscored, or a win rate within the too-hard/too-easy bounds).
        Records of ``skill`` are preferred; one is chosen with ``rng``, a *barren* one (played,
        itself or through the designs that vary it, and every play scored 0: nothing the agent
        can learn from) with ``designer.barren_parent_weight`` times the chance of the others.
        """
        tool_use = designer.mode == "tool_use"
        easy, hard = designer.too_easy_win_rate, designer.too_hard_win_rate
        pool = [
            r
            for r in self._showable(designer)
            if (r.win_rate is None or hard <= r.win_rate <= easy)
            and (
                r.skill in designer.skills
                or (r.skill == UNKNOWN_SKILL and ("ToolUseEnv" in r.code_head) == tool_use)
            )
        ]
        same = [r for r in pool if r.skill == skill]
        candidates = same or pool
        if not candidates:
            return None
        barren = self.barren()
        weights = [designer.barren_parent_weight if r.env_id in barren else 1.0 for r in candidates]
        if len(set(weights)) == 1:  # nothing to prefer: a plain draw, as before weights existed
            return rng.choice(candidates)
        return rng.choices(candidates, weights)[0]

    def barren(self) -> set[str]:
        """Env ids of the records played, themselves or through the designs that vary them
        (``parent_id``), every play of which scored 0 (``mean_return`` 0)."""
        returns: dict[str, list[float]] = {}
        for r in self._records:
            if r.mean_return is not None:
                for env_id in {r.env_id, r.parent_id} - {None}:
                    returns.setdefault(str(env_id), []).append(r.mean_return)
        return {env_id for env_id, got in returns.items() if max(got) <= 0.0}

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


# ---------------------------------------------------------------- reading a design's declarations


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
        tree = parse_module(code)
    except PARSE_ERRORS:  # broken designs (absurd nesting too) are still worth remembering
        match = _SKILL_LINE.search(code)
        return {"skill": match.group(2)} if match else {}
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    classes.sort(key=lambda c: not c.name.endswith("Env"))  # stable: file order otherwise
    found: dict[str, str] = {}
    for body in [tree.body, *(c.body for c in classes)]:
        for key, value in _string_attrs(body).items():
            found.setdefault(key, value)
    return {k: v for k, v in found.items() if k in ("skill", "hint")}
