"""Writing one stage's artifacts and committing them, and finding a campaign's artifacts.

A :class:`StageRecord` collects a stage's outputs (JSON, JSON lines, text, content-addressed
blobs) under ``campaign/<id>/round-<NNNN>/<stage>/`` and writes the stage manifest last, so a
crash leaves no committed half-stage. Keys are deterministic: a re-run overwrites, never adds.
The manifest records each output's size and sha256, so a resume can verify them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from spade.config import CampaignConfig
from spade.errors import ObjectCorruptError
from spade.pipeline.keys import EXTRA_STAGES, config_hash, stage_code_version
from spade.storage import CampaignStore, ObjectStore, StageManifest, utc_now
from spade.storage.layout import RunLayout, file_entry
from spade.storage.store import SHA256_HEX, blob_key, json_bytes

if TYPE_CHECKING:  # the context imports this module (for campaign_store)
    from spade.pipeline.context import RoundContext

CONFIG_KEY = "config.yaml"


def campaign_store(cfg: CampaignConfig, campaign_id: str) -> CampaignStore:
    """The campaign's artifacts in the configured object store; its stages are the store's
    built-in ones and those the pipeline's modules declare besides (:data:`EXTRA_STAGES`)."""
    layout = RunLayout(campaign_id, EXTRA_STAGES)
    return CampaignStore(ObjectStore.from_config(cfg.storage), layout)


def jsonl(rows: Iterable[Any]) -> bytes:
    """JSON lines (one compact object per line)."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def read_jsonl(cs: CampaignStore, key: str) -> list[Any]:
    """The rows of a JSON-lines object; ObjectCorruptError naming it and the line if one is
    not JSON (a truncated object), ObjectMissingError if it is absent."""
    rows = []
    for n, line in enumerate(cs.store.read_bytes(key).splitlines(), 1):
        if not line.strip():
            continue
        try:  # a torn or tampered object: say which one, and where
            rows.append(json.loads(line))
        except ValueError as exc:
            raise ObjectCorruptError(f"{cs.store.url(key)} line {n} is not JSON: {exc}") from exc
    return rows


def _stored_key(ref: str) -> str | None:
    """The store key an output reference names: a key, a blob's digest, or (a URL or a local
    path: a checkpoint folder) none."""
    if "://" in ref or ref.startswith("/"):
        return None
    return blob_key(ref) if SHA256_HEX.fullmatch(ref) else ref


class StageRecord:
    """One stage's outputs in one round; :meth:`commit` writes the manifest (last)."""

    def __init__(self, ctx: RoundContext, stage: str, inputs: dict[str, str] | None = None) -> None:
        cfg, round = ctx.config, ctx.round
        self.cs = ctx.store
        self.round, self.stage = round, self.cs.layout.check_stage(stage)
        # the weights the round serves and how many rounds they lag (run.overlap)
        self.inputs = {"served": ctx.weights.version, "staleness": str(ctx.staleness)}
        self.inputs |= inputs or {}
        self.outputs: dict[str, str] = {}
        self.files: dict[str, dict[str, Any]] = {}  # name -> key, size, sha256 (as written)
        self.config_hash = config_hash(cfg, stage)
        self.code_version = stage_code_version(stage)
        self.started, self.t0 = utc_now(), time.perf_counter()
        if not self.cs.store.exists(f"{self.cs.layout.round_prefix(round)}/{CONFIG_KEY}"):
            self.write_round_config(cfg)

    def write_round_config(self, cfg: CampaignConfig) -> None:
        """The resolved config the round ran with (first stage of the round writes it)."""
        key = f"{self.cs.layout.round_prefix(self.round)}/{CONFIG_KEY}"
        self.cs.store.write_bytes(key, cfg.resolved_yaml().encode())

    def key(self, name: str) -> str:
        return self.cs.layout.stage_key(self.round, self.stage, name)

    def write_bytes(self, name: str, data: bytes) -> str:
        key = self.key(name)
        self.cs.store.write_bytes(key, data)
        self.outputs[name] = key
        self.files[name] = file_entry(key, data)
        return key

    def write_json(self, name: str, obj: Any) -> str:
        return self.write_bytes(name, json_bytes(obj))

    def write_jsonl(self, name: str, rows: Iterable[Any]) -> str:
        return self.write_bytes(name, jsonl(rows))

    def write_blob(self, name: str, data: bytes) -> str:
        """Content-addressed (stored once however often written); the output maps to its digest."""
        digest = self.cs.store.put_blob(data)
        self.outputs[name] = digest
        self.files[name] = file_entry(blob_key(digest), data)
        return digest

    def _file_entries(self) -> dict[str, dict[str, Any]]:
        """Size and sha256 of every output in this store: as written, or (an output another
        task wrote, named by its key) read back now. A URL (a checkpoint folder) is left out."""
        files = {}
        for name, ref in self.outputs.items():
            key = _stored_key(ref)
            if key is None:
                continue
            if name in self.files and self.files[name]["key"] == key:
                files[name] = self.files[name]
            else:
                files[name] = file_entry(key, self.cs.store.read_bytes(key))
        return files

    def commit(
        self, status: str = "completed", note: str = "", *, seconds: float | None = None
    ) -> StageManifest:
        """Write the manifest; ``seconds`` overrides the time since this record was made (for
        stages whose work ran in mapped tasks before it)."""
        elapsed = time.perf_counter() - self.t0 if seconds is None else seconds
        manifest = StageManifest(
            stage=self.stage,
            round=self.round,
            inputs=self.inputs,
            outputs=self.outputs,
            config_hash=self.config_hash,
            code_version=self.code_version,
            started=self.started,
            finished=utc_now(),
            seconds=round(elapsed, 3),
            status=status,  # type: ignore[arg-type]
            note=note,
            files=self._file_entries(),
        )
        self.cs.write_stage_manifest(manifest)
        return manifest


def busy_seconds(spans: list[dict[str, Any]]) -> float:
    """Wall time the mapped tasks of a stage were busy: the union of their [started, finished]
    intervals (epoch seconds), so parallel work is not counted twice and gaps are not counted."""
    total, end = 0.0, float("-inf")
    for s in sorted(spans, key=lambda s: s.get("started", 0.0)):
        start, finish = s.get("started"), s.get("finished")
        if start is None or finish is None:
            continue
        if finish > end:
            total += finish - max(start, end)
            end = finish
    return total
