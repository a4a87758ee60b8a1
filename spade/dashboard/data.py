"""Loading a campaign for the dashboard: per-round summaries, one environment's details, memory.

Plain reads of the object store (a local folder or ``s3://``) in the layout of
:mod:`spade.storage.layout`; only committed stages (those with a manifest) count. The overview
reads the stage manifests and the small per-round files (``score/scored.jsonl``,
``train_*/outcome.json``, ``heldout/summary.json``, ``publish/weights.json``, and
``memory/memory.json`` of the first and last round only: the sizes in between follow from the
FIFO bound). Each round's summary is cached keyed on its manifests, so a reload re-reads the
manifests and nothing else unless a stage committed since (and a page need not wait for even
that: ``overview(wait=False)`` answers with the previous overview and re-reads in the
background). An environment's code, document, verdict and transcripts, and the held-out
stage's per-task rows (``heldout/suites.jsonl``, ``heldout/results.jsonl``) and transcripts
(``heldout/transcripts/<suite>.jsonl``), are read only when asked for, and memoised the same
way. :func:`loader` keeps one :class:`CampaignData` per campaign for the whole process, so a
server warmed at start (``dashboards/serve.py``) serves every session from it.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from spade.dashboard.summary import (
    ROUND_FILES,
    Overview,
    RoundSummary,
    memory_sizes,
    parse_jsonl,
    summarize,
)
from spade.storage import CampaignStore, ObjectStore, StageManifest, blob_key, validate_key

HEAVY_FIELDS = ("messages", "prompt_token_ids", "token_ids", "logprobs")
"""Fields of stored design attempts the dashboard never shows (prompts, tokens)."""
COMPLETION_CHARS = 8000
"""The head of a design's completion that is kept (what the model wrote, for a design whose
code could not be extracted)."""
_ROUND_DIR = re.compile(r"round-(\d{4,})")
MEMO_SIZE = 64
"""Lazily read files kept (per :class:`CampaignData`), least recently used dropped first."""


def read_many(store: ObjectStore, keys: Iterable[str]) -> dict[str, bytes]:
    """The objects under ``keys`` that exist, fetched in one call (concurrently on S3)."""
    paths = {store.fs._strip_protocol(f"{store.root_path}/{validate_key(k)}"): k for k in keys}
    if not paths:
        return {}
    got = store.fs.cat(list(paths), on_error="omit")
    return {paths[p]: bytes(v) for p, v in got.items() if p in paths}


_LOADERS: dict[tuple[str, str, str], CampaignData] = {}
_LOADERS_LOCK = threading.Lock()


def loader(root: str, campaign_id: str, storage_options: str = "{}") -> CampaignData:
    """The process's one :class:`CampaignData` for a campaign (``storage_options`` as JSON):
    ``dashboards/serve.py`` warms it before the server starts, and every session of the
    server then finds the campaign already read."""
    key = (root, campaign_id, storage_options)
    with _LOADERS_LOCK:
        if key not in _LOADERS:
            _LOADERS[key] = CampaignData(root, campaign_id, json.loads(storage_options))
        return _LOADERS[key]


def campaign_ids(store: ObjectStore) -> list[str]:
    """The campaigns in ``store`` (folders under ``campaign/``), sorted."""
    path = f"{store.root_path}/campaign"
    store.fs.invalidate_cache(path)
    try:  # a store no campaign has written to yet
        entries = store.fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)


@dataclass(frozen=True)
class EnvDetail:
    """One design of one round: what the gallery shows (fields absent in the store: None)."""

    round: int
    env_id: str
    scored: dict[str, Any]
    attempt: dict[str, Any] | None
    code: str | None
    document: str | None
    hint: str | None
    verdict: dict[str, Any] | None
    evaluation: dict[str, Any] | None


class CampaignData:
    """One campaign in one store, with per-round caches keyed on the stage manifests."""

    def __init__(
        self, root: str, campaign_id: str, storage_options: Mapping[str, Any] | None = None
    ) -> None:
        self.cs = CampaignStore(ObjectStore(root, storage_options), campaign_id)
        self._rounds: dict[int, tuple[tuple[Any, ...], RoundSummary]] = {}
        self._manifests: dict[int, dict[str, StageManifest]] = {}
        self._memo: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._last: tuple[float, Overview] | None = None
        self._lock = threading.RLock()
        self._refreshing: threading.Thread | None = None

    @property
    def store(self) -> ObjectStore:
        return self.cs.store

    def list_rounds(self) -> list[int]:
        """Rounds with a folder, ascending (one listing of the campaign folder, not a walk)."""
        path = f"{self.store.root_path}/{self.cs.layout.campaign_prefix}"
        self.store.fs.invalidate_cache(path)
        try:  # no round written yet: the campaign folder does not exist
            entries = self.store.fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
        names = (str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)
        return sorted(int(m[1]) for n in names if (m := _ROUND_DIR.fullmatch(n)))

    def read_manifests(self, rounds: list[int]) -> dict[int, dict[str, StageManifest]]:
        """The parsing, matching manifests of ``rounds`` (stage -> manifest), in stage order."""
        layout = self.cs.layout
        keys = {layout.manifest_key(r, s): (r, s) for r in rounds for s in layout.stages}
        found: dict[tuple[int, str], StageManifest] = {}
        for key, raw in read_many(self.store, keys).items():
            try:  # a torn or foreign manifest does not commit its stage (as in CampaignStore)
                m = StageManifest.from_json(json.loads(raw))
            except (TypeError, ValueError):
                continue
            if (m.round, m.stage) == keys[key]:
                found[keys[key]] = m
        return {r: {s: found[r, s] for s in layout.stages if (r, s) in found} for r in rounds}

    def overview(self, max_age_s: float = 0.0, *, wait: bool = True) -> Overview:
        """Every round's summary; the previous answer if younger than ``max_age_s``.

        ``wait=False``: an older previous answer is returned at once and a re-read starts in
        the background (the next call gets it), so a page load never waits on the store once
        the campaign has been read (re-reading the manifests grows with the rounds: ~0.3 s
        for 200 local rounds, more on S3)."""
        if not wait and self._last is not None:
            if time.monotonic() - self._last[0] >= max_age_s:
                self._refresh_in_background()
            return self._last[1]
        with self._lock:
            if self._last and time.monotonic() - self._last[0] < max_age_s:
                return self._last[1]
            rounds = self.list_rounds()
            manifests = self.read_manifests(rounds)
            sigs = {
                r: tuple((s, m.status, m.finished) for s, m in manifests[r].items()) for r in rounds
            }
            stale = [r for r in rounds if r not in self._rounds or self._rounds[r][0] != sigs[r]]
            wanted = {
                self.cs.layout.stage_key(r, stage, name): (r, what)
                for r in stale
                for what, (stage, name) in ROUND_FILES.items()
                if stage in manifests[r]
            }
            files: dict[int, dict[str, bytes]] = {r: {} for r in stale}
            for key, data in read_many(self.store, wanted).items():
                files[wanted[key][0]][wanted[key][1]] = data
            for r in stale:
                self._rounds[r] = (sigs[r], summarize(r, manifests[r], files[r]))
            for r in set(self._rounds) - set(rounds):  # deleted since
                del self._rounds[r]
            self._manifests = manifests
            summaries = [self._rounds[r][1] for r in rounds]
            capacity = self._with_memory_sizes(summaries)
            view = Overview(
                self.cs.layout.campaign_id,
                self.store.url(self.cs.layout.campaign_prefix),
                summaries,
                capacity,
            )
            self._last = (time.monotonic(), view)
            return view

    def _refresh_in_background(self) -> None:
        with self._lock:
            if self._refreshing is not None and self._refreshing.is_alive():
                return
            self._refreshing = threading.Thread(
                target=self.overview, name="spade-dashboard-refresh", daemon=True
            )
            self._refreshing.start()

    def warm(self) -> Overview:
        """Read what a first page load shows: the overview, the memory, the latest scored
        round's rejections, held-out suite items and its first design's details."""
        ov = self.overview()
        self.memory()
        scored = [r for r in ov.rounds if r.attempts]
        if scored:
            last = scored[-1]
            self.rejected_checks(last.round)
            self.heldout_items(last.round)
            if last.envs:
                self.env_detail(last.round, last.envs[0]["env_id"])
        return ov

    def _with_memory_sizes(self, summaries: list[RoundSummary]) -> int | None:
        """Fill in ``memory_size`` (in place in the list); returns the latest capacity."""
        with_memory = [s.round for s in summaries if "memory" in s.stages_done]
        first, last = (
            (self.memory(with_memory[0]), self.memory(with_memory[-1]))
            if with_memory
            else (None, None)
        )
        if not first or not last:
            return None
        capacity = int(last.get("capacity") or len(last["records"]))
        sizes = memory_sizes(summaries, len(first["records"]), capacity)
        sizes[[s.round for s in summaries].index(with_memory[-1])] = len(last["records"])
        summaries[:] = [replace(s, memory_size=n) for s, n in zip(summaries, sizes, strict=True)]
        return capacity

    # -- lazily read, memoised on the manifest of the stage that wrote it ---------------------

    def _stage_file(self, rnd: int, stage: str, name: str, parse: Callable[[bytes], Any]) -> Any:
        """``parse`` of a committed stage's output; None if the stage or output is absent."""
        with self._lock:
            if rnd not in self._manifests:
                self._manifests.update(self.read_manifests([rnd]))
            m = self._manifests[rnd].get(stage)
            if m is None:
                return None
            memo = (rnd, stage, name, m.finished)
            if memo not in self._memo:
                self._memo[memo] = self._read(self.cs.layout.stage_key(rnd, stage, name), parse)
                while len(self._memo) > MEMO_SIZE:
                    self._memo.popitem(last=False)
            self._memo.move_to_end(memo)
            return self._memo[memo]

    def _read(self, key: str, parse: Callable[[bytes], Any]) -> Any:
        try:  # a stage may commit without this output (skipped, or before the output existed)
            return parse(self.store.read_bytes(key))
        except FileNotFoundError:
            return None

    def memory(self, rnd: int | None = None) -> dict[str, Any] | None:
        """The memory state after ``rnd`` (default: the latest round with a memory stage)."""
        if rnd is None:
            if not self._manifests:
                self.overview()
            ready = sorted(r for r, ms in self._manifests.items() if "memory" in ms)
            done = [r for r in ready if self._manifests[r]["memory"].done]
            if not done:
                return None
            rnd = done[-1]
        return self._stage_file(rnd, "memory", "memory.json", json.loads)

    def attempts(self, rnd: int) -> list[dict[str, Any]]:
        """The round's design attempts with their verdicts (prompts and tokens left out)."""

        def light(data: bytes) -> list[dict[str, Any]]:
            rows = [
                {k: v for k, v in a.items() if k not in HEAVY_FIELDS} for a in parse_jsonl(data)
            ]
            for a in rows:
                if isinstance(a.get("completion"), str):
                    a["completion"] = a["completion"][:COMPLETION_CHARS]
            return rows

        return self._stage_file(rnd, "verify", "attempts.jsonl", light) or []

    def rejected_checks(self, rnd: int) -> dict[str, int]:
        """Rejected designs of the round by the verifier check they failed (designs that never
        reached the verifier: by their failure kind, e.g. ``parse``); attempts whose request
        failed on our side as ``inference``, even a failed repair of a verified design."""
        counts = Counter(
            "inference"
            if a.get("failure_kind") == "inference"
            else (a.get("verdict") or {}).get("failed_check") or a.get("failure_kind") or "rejected"
            for a in self.attempts(rnd)
            if not a.get("accepted")
        )
        return dict(counts.most_common())

    def env_detail(self, rnd: int, env_id: str) -> EnvDetail:
        """Everything the gallery shows about one design of round ``rnd``."""
        summary = self.overview(max_age_s=float("inf")).round(rnd)
        scored = next(
            (e for e in (summary.envs if summary else []) if e.get("env_id") == env_id), {}
        )
        slot = (scored.get("slot"), scored.get("attempt"))
        same = (  # the scored row names its slot and attempt; before scoring, the env id
            (lambda a: (a.get("slot"), a.get("attempt")) == slot)
            if scored
            else (lambda a: a.get("env_id") == env_id)
        )
        attempt = next((a for a in self.attempts(rnd) if same(a)), {})
        code, verdict = attempt.get("code"), attempt.get("verdict")
        layout = self.cs.layout
        pool = scored.get("source") == "pool"  # a pool environment: its own stage's files
        if env_id.startswith("env-"):
            verdict = verdict or self._read(
                layout.stage_key(rnd, "pool" if pool else "verify", f"verdicts/{env_id}.json"),
                json.loads,
            )
            design = self._manifests.get(rnd, {}).get("pool" if pool else "design")
            digest = design.outputs.get(f"code/{env_id}") if design else None
            if code is None and digest:
                code = self._read(blob_key(digest), bytes.decode)
        hints = self._stage_file(rnd, "hint", "environments.jsonl", parse_jsonl) or []
        hints += self._stage_file(rnd, "pool", "environments.jsonl", parse_jsonl) or []
        hinted: dict[str, Any] = next((h for h in hints if h.get("env_id") == env_id), {})
        doc_id = attempt.get("doc_id") or hinted.get("doc_id")
        docs = self._stage_file(rnd, "sample_documents", "documents.jsonl", parse_jsonl) or []
        document = next((d.get("text") for d in docs if d.get("doc_id") == doc_id), None)
        evaluation = None
        if env_id.startswith("env-") and "evaluate" in self._manifests.get(rnd, {}):
            evaluation = self._read(
                layout.stage_key(rnd, "evaluate", f"envs/{env_id}/summary.json"), json.loads
            )
        return EnvDetail(
            rnd,
            env_id,
            scored,
            attempt or None,
            code,
            document,
            hinted.get("hint") or attempt.get("hint"),
            verdict,
            evaluation,
        )

    def trajectories(self, rnd: int, env_id: str) -> list[dict[str, Any]]:
        """The environment's plays in round ``rnd`` (messages and outcome; tokens left out)."""

        def light(data: bytes) -> list[dict[str, Any]]:
            return [{k: v for k, v in t.items() if k != "turns"} for t in parse_jsonl(data)]

        if not env_id.startswith("env-"):  # a design without code was never played
            return []
        return self._stage_file(rnd, "evaluate", f"envs/{env_id}/trajectories.jsonl", light) or []

    # -- held-out: environment files and benchmark suites ------------------------------------

    def heldout_results(self, rnd: int) -> list[dict[str, Any]]:
        """The held-out environment files' rows of round ``rnd`` (win rate per file)."""
        return self._stage_file(rnd, "heldout", "results.jsonl", parse_jsonl) or []

    def heldout_items(self, rnd: int) -> list[dict[str, Any]]:
        """The held-out suites' rows of round ``rnd``: one per task (suite, task_id, score,
        status, turns, failure)."""
        return self._stage_file(rnd, "heldout", "suites.jsonl", parse_jsonl) or []

    def heldout_transcripts(self, rnd: int, suite: str) -> dict[str, list[dict[str, Any]]]:
        """The messages of every play of ``suite`` in round ``rnd``, by task id."""
        rows = self._stage_file(rnd, "heldout", f"transcripts/{suite}.jsonl", parse_jsonl) or []
        return {str(r.get("task_id")): r.get("messages") or [] for r in rows}
