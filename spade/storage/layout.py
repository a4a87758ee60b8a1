"""Where a campaign's artifacts live, and the per-stage manifest that commits a stage.

Layout (keys relative to the store root)::

    campaign/<campaign_id>/round-<NNNN>/<stage>/...            the stage's outputs
    campaign/<campaign_id>/round-<NNNN>/<stage>/manifest.json  written LAST: the commit marker
    blobs/sha256/<aa>/<sha256>                                  content-addressed (shared)

A stage is *done* in a round exactly when its ``manifest.json`` exists, parses, names that
stage and round, and has status ``completed`` (or ``skipped``). Outputs without a manifest are
the leftovers of an interrupted run: never reported as completed, overwritten on re-run.

The manifest records the size and sha256 of every stored output (``files``);
:meth:`CampaignStore.verify_stage` checks them, so a resume finds an output that went missing or
corrupt after its stage committed, and runs that stage again.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from spade.errors import InvalidKeyError, ObjectCorruptError, ObjectMissingError
from spade.storage.store import ObjectStore, validate_key

logger = logging.getLogger(__name__)

STAGES: tuple[str, ...] = (
    "sample_documents",
    "design",
    "verify",
    "hint",
    "pool",
    "evaluate",
    "score",
    "memory",
    "train_agent",
    "train_designer",
    "publish",
    "heldout",
)
"""The round's stages in pipeline order (docs/architecture.md §2)."""

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
Status = Literal["completed", "failed", "skipped"]
DONE_STATUSES: frozenset[str] = frozenset({"completed", "skipped"})
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_CAMPAIGN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ROUND = re.compile(r"round-(\d{4,})")


def utc_now() -> str:
    """The current time as an ISO-8601 UTC string (what manifests record)."""
    return datetime.now(UTC).isoformat()


class RunLayout:
    """Keys of one campaign: ``campaign/<id>/round-<NNNN>/<stage>/...``.

    Stage names are checked against :data:`STAGES` plus ``extra_stages`` (lowercase
    identifiers, appended after the built-in ones in pipeline order).
    """

    def __init__(self, campaign_id: str, extra_stages: Iterable[str] = ()) -> None:
        if not isinstance(campaign_id, str) or not _CAMPAIGN.fullmatch(campaign_id):
            raise InvalidKeyError(
                f"campaign id {campaign_id!r} must be letters, digits, '.', '_' or '-'"
                " (starting with a letter or digit)"
            )
        extra = tuple(extra_stages)
        for name in extra:
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ValueError(f"stage name {name!r} must match [a-z][a-z0-9_]*")
        self.campaign_id = campaign_id
        self.stages: tuple[str, ...] = STAGES + tuple(s for s in extra if s not in STAGES)

    def __repr__(self) -> str:
        return f"RunLayout({self.campaign_id!r})"

    def check_stage(self, stage: str) -> str:
        """Return ``stage`` if known to this layout; ValueError naming the known ones otherwise."""
        if stage not in self.stages:
            raise ValueError(f"unknown stage {stage!r}; known: {', '.join(self.stages)}")
        return stage

    @property
    def campaign_prefix(self) -> str:
        return f"campaign/{self.campaign_id}"

    def round_prefix(self, round: int) -> str:
        """``campaign/<id>/round-<NNNN>`` (round >= 0)."""
        if not isinstance(round, int) or isinstance(round, bool) or round < 0:
            raise ValueError(f"round must be an int >= 0, not {round!r}")
        return f"{self.campaign_prefix}/round-{round:04d}"

    def stage_prefix(self, round: int, stage: str) -> str:
        """``campaign/<id>/round-<NNNN>/<stage>``."""
        return f"{self.round_prefix(round)}/{self.check_stage(stage)}"

    def stage_key(self, round: int, stage: str, name: str) -> str:
        """The key of output ``name`` (itself may hold '/') of ``stage`` in ``round``."""
        return validate_key(f"{self.stage_prefix(round, stage)}/{validate_key(name)}")

    def manifest_key(self, round: int, stage: str) -> str:
        return f"{self.stage_prefix(round, stage)}/{MANIFEST}"


@dataclass(frozen=True)
class StageManifest:
    """What one stage of one round consumed and produced; its presence commits the stage.

    ``inputs`` / ``outputs`` map names to blob digests or store keys. ``files`` maps each
    output stored in this store to its key, size and sha256 (:func:`file_entry`; a checkpoint
    URL is not one: its own manifest checksums its files). ``config_hash`` and
    ``code_version`` are the cache key parts; ``started`` / ``finished`` are ISO-8601 UTC.
    """

    stage: str
    round: int
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    config_hash: str = ""
    code_version: str = ""
    started: str = ""
    finished: str = ""
    seconds: float = 0.0
    status: Status = "completed"
    note: str = ""  # why a stage failed or was skipped
    format: int = MANIFEST_FORMAT
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # absent in older manifests

    def __post_init__(self) -> None:
        if self.status not in get_args(Status):
            raise ValueError(f"status must be one of {get_args(Status)}, not {self.status!r}")
        for name in ("inputs", "outputs"):
            mapping = getattr(self, name)
            if not isinstance(mapping, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
            ):
                raise ValueError(f"{name} must map names to blob digests or keys (str -> str)")
        if not isinstance(self.files, dict) or not all(
            isinstance(v, dict) and set(v) == {"key", "size", "sha256"} for v in self.files.values()
        ):
            raise ValueError("files must map output names to {key, size, sha256}")

    @property
    def done(self) -> bool:
        """Completed or skipped: resume does not run it again."""
        return self.status in DONE_STATUSES

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: Any) -> StageManifest:
        """Parse a stored manifest; ObjectCorruptError (a ValueError) if it is not a
        well-formed one (store data, not our code: a torn, foreign or older file)."""
        if not isinstance(obj, dict):
            raise ObjectCorruptError(f"a manifest is a JSON object, not {type(obj).__name__}")
        if obj.get("format") != MANIFEST_FORMAT:
            raise ObjectCorruptError(
                f"manifest format {obj.get('format')!r}, need {MANIFEST_FORMAT}"
            )
        if not isinstance(obj.get("round"), int) or not isinstance(obj.get("stage"), str):
            raise ObjectCorruptError("manifest needs an int 'round' and a str 'stage'")
        try:  # unknown or missing fields (TypeError), bad values (__post_init__'s ValueError)
            manifest = cls(**obj)
        except (TypeError, ValueError) as exc:
            raise ObjectCorruptError(f"not a stage manifest: {exc}") from exc
        if not isinstance(manifest.seconds, int | float):
            raise ObjectCorruptError(f"seconds must be a number, not {manifest.seconds!r}")
        return manifest


def file_entry(key: str, data: bytes) -> dict[str, Any]:
    """What a manifest records of one stored output."""
    return {"key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


class CampaignStore:
    """One campaign's artifacts and stage manifests in an :class:`ObjectStore`."""

    def __init__(self, store: ObjectStore, layout: RunLayout | str) -> None:
        self.store = store
        self.layout = layout if isinstance(layout, RunLayout) else RunLayout(layout)

    def __repr__(self) -> str:
        return f"CampaignStore({self.store!r}, {self.layout!r})"

    def write_stage_manifest(self, manifest: StageManifest) -> str:
        """Write the manifest (call it after every output is stored); returns its key."""
        key = self.layout.manifest_key(manifest.round, manifest.stage)
        self.store.write_json(key, manifest.to_json())
        return key

    def read_stage_manifest(self, round: int, stage: str) -> StageManifest | None:
        """The stage's manifest, or None when absent or unparsable (the latter is logged)."""
        key = self.layout.manifest_key(round, stage)
        try:  # absent: the stage never committed in this round
            raw = self.store.read_json(key)
        except FileNotFoundError:
            return None
        except ObjectCorruptError as exc:  # torn or foreign file: treated as not committed
            logger.warning("unparsable stage manifest %s: %s", self.store.url(key), exc)
            return None
        try:  # well-formed JSON that is not a manifest of this stage: also not committed
            manifest = StageManifest.from_json(raw)
        except ObjectCorruptError as exc:
            logger.warning("invalid stage manifest %s: %s", self.store.url(key), exc)
            return None
        if (manifest.round, manifest.stage) != (round, stage):
            logger.warning(
                "stage manifest %s is for round %d stage %s",
                self.store.url(key),
                manifest.round,
                manifest.stage,
            )
            return None
        return manifest

    def rounds(self) -> list[int]:
        """Rounds holding any object, ascending."""
        found = set()
        for key in self.store.list(self.layout.campaign_prefix):
            part = key[len(self.layout.campaign_prefix) + 1 :].split("/", 1)[0]
            if m := _ROUND.fullmatch(part):
                found.add(int(m[1]))
        return sorted(found)

    def completed_stages(self, round: int) -> list[str]:
        """Stages of ``round`` whose manifest commits them as done, in pipeline order."""
        prefix = self.layout.round_prefix(round)
        present = set()
        for key in self.store.list(prefix):
            parts = key[len(prefix) + 1 :].split("/")
            if len(parts) == 2 and parts[1] == MANIFEST and parts[0] in self.layout.stages:
                present.add(parts[0])
        done = []
        for stage in self.layout.stages:
            if stage in present and (m := self.read_stage_manifest(round, stage)) and m.done:
                done.append(stage)
        return done

    def last_completed(self) -> tuple[int, str] | None:
        """``(round, stage)``: the latest round with a done stage and its last such stage in
        pipeline order; None when nothing ever completed."""
        for round in reversed(self.rounds()):
            if done := self.completed_stages(round):
                return round, done[-1]
        return None

    def pending_stages(self, round: int, stages: Iterable[str] | None = None) -> list[str]:
        """``stages`` (default: all of the layout's) not done in ``round``, in the given order."""
        done = set(self.completed_stages(round))
        wanted = self.layout.stages if stages is None else tuple(stages)
        return [self.layout.check_stage(s) for s in wanted if s not in done]

    def verify_stage(self, round: int, stage: str, under: str = "") -> list[str]:
        """What is wrong with the outputs the stage's done manifest records (those named
        ``under...`` when given): one line per missing or corrupt object, naming it; empty
        when they verify, or when the stage is not done (nothing to verify)."""
        manifest = self.read_stage_manifest(round, stage)
        if manifest is None or not manifest.done:
            return []
        problems = []
        for name, entry in sorted(manifest.files.items()):
            if not name.startswith(under):
                continue
            key = str(entry["key"])
            try:  # absent is one of the things this looks for
                data = self.store.read_bytes(key)
            except ObjectMissingError:
                problems.append(f"missing {self.store.url(key)}")
                continue
            actual = file_entry(key, data)
            if (actual["size"], actual["sha256"]) != (entry["size"], entry["sha256"]):
                problems.append(
                    f"corrupt {self.store.url(key)}: {actual['size']} bytes, sha256"
                    f" {actual['sha256'][:12]}, the manifest recorded {entry['size']} bytes,"
                    f" sha256 {str(entry['sha256'])[:12]}"
                )
        return problems

    def repairs(self, round: int, stage: str, scope: str = "", *, bump: bool = False) -> int:
        """How often the stage's outputs (those named ``scope...``) were found damaged and
        recomputed; ``bump`` counts one more. A cache key holds it, so a repaired stage's new
        result, not the one from before the damage, is what later resumes reuse."""
        name = hashlib.sha256(scope.encode()).hexdigest()[:16] if scope else "stage"
        key = f"{self.layout.stage_prefix(round, stage)}/repairs/{name}.json"
        try:  # absent: never repaired
            count = int(self.store.read_json(key)["count"])
        except ObjectMissingError:
            count = 0
        if bump:
            count += 1
            self.store.write_json(key, {"count": count, "scope": scope, "at": utc_now()})
        return count

    def unverified_stages(self, round: int) -> dict[str, list[str]]:
        """The round's done stages whose outputs do not verify, with what is wrong."""
        found = {}
        for stage in self.completed_stages(round):
            if problems := self.verify_stage(round, stage):
                found[stage] = problems
        return found
