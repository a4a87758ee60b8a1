"""Checkpoint retention (``checkpoints.keep_last``): after a round's publish stage commits,
the campaign's training checkpoints beyond the newest ``keep_last`` are deleted from the store,
with their staged serving copies on this machine, except those a round may still read.

A checkpoint is one committed training stage's ``checkpoint/`` folder
(``round-<NNNN>/train_<role>/checkpoint/``); newest first means by round, the designer's update
before the agent's (it trains on top of it). Whatever ``keep_last`` says, a pass after round
R's publish keeps every checkpoint one of these may read (:func:`needed_weights`):

- round R's published weights (what the next round serves and trains from, and what R's
  held-out stage plays);
- for round R, round R+1 and (``run.overlap``) any round between that is not complete yet: the
  weights it serves, the parent it trains from and what it published. A round still in
  flight beside R reads them, and so does a resume of an interrupted round whose committed
  stages run again (a cache miss after a code change, a repair).

A pass only prunes when round R is the campaign's newest published round: a publish run again
for an older round (a resume repairing it) deletes nothing. It never touches a round after R
(with ``run.overlap`` round R+1 may be training beside it).

What a pass did is recorded twice: ``publish/retention.json`` of round R (kept, needed,
pruned, the staged copies removed; the publish manifest is committed again with it and a
note), and beside each pruned stage's outputs a ``pruned.json`` (written before its folder is
deleted, so an interrupted pass is finished by the next), which :func:`pruned_record` reads:
a reader that wants an old round's weights (the on-demand held-out flow) says they were
pruned instead of failing on a missing file. A round's committed manifests and its
``outcome.json`` keep the checkpoint's URI and still verify: ``spade status`` and the dashboard
never open it, and a resume opens only what was kept. Only a recomputation of a stage of a
round whose weights were pruned (a repair of an old round's damaged output) cannot run; its
outputs stay readable.

A pass reads the manifests of the checkpoints the last pass kept and of the rounds since (the
first pass, or one without a record below it, reads every round): its cost follows
``keep_last`` and the rounds since, not the campaign's length.
"""

from __future__ import annotations

import logging
import re
import shutil
from dataclasses import dataclass
from typing import Any

from spade.errors import CheckpointError
from spade.pipeline.campaign import round_complete
from spade.pipeline.context import RoundContext
from spade.pipeline.state import published_weights
from spade.records import WeightsRef
from spade.storage import CampaignStore, utc_now

log = logging.getLogger(__name__)

TRAIN_STAGES = ("train_agent", "train_designer")  # in training order: the designer's is newer
PRUNED = "pruned.json"
"""In a training stage's folder: its checkpoint was deleted (which pass, when)."""
RETENTION = "retention.json"
"""In a publish stage's folder: what the pass after it kept and deleted."""
_VERSION = re.compile(r"r(\d{4,})-(agent|designer)")  # spade.pipeline.train's versions


@dataclass(frozen=True)
class Checkpoint:
    """A committed training stage's checkpoint."""

    round: int
    stage: str
    weights: WeightsRef

    @property
    def order(self) -> tuple[int, int]:
        """Sorts oldest first: by round, then the agent's before the designer's."""
        return self.round, TRAIN_STAGES.index(self.stage)

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "stage": self.stage, **self.weights.to_dict()}


def _committed(cs: CampaignStore, round: int, stage: str) -> tuple[Checkpoint, bool] | None:
    """The stage's checkpoint when it committed one, and whether a pass pruned it already
    (its tombstone is there: the folder may still hold what an interrupted pass left)."""
    manifest = cs.read_stage_manifest(round, stage)
    if manifest is None or manifest.status != "completed" or "checkpoint" not in manifest.outputs:
        return None
    outcome = cs.store.read_json(cs.layout.stage_key(round, stage, "outcome.json"))
    pruned = cs.store.exists(cs.layout.stage_key(round, stage, PRUNED))
    return Checkpoint(round, stage, WeightsRef.from_dict(outcome)), pruned


def _last_record(cs: CampaignStore, round: int) -> tuple[int, dict[str, Any]] | None:
    """The newest retention record of a round before ``round``, and that round."""
    for r in range(round - 1, -1, -1):
        key = cs.layout.stage_key(r, "publish", RETENTION)
        if cs.store.exists(key):
            return r, cs.store.read_json(key)
    return None


def _candidates(cs: CampaignStore, round: int) -> tuple[list[Checkpoint], list[Checkpoint]]:
    """The checkpoints of rounds up to ``round`` that the last record kept and those of the
    rounds after it (every round when there is none), newest first: those not pruned yet,
    and those a pass pruned already (to finish: an interrupted pass leaves files behind)."""
    last = _last_record(cs, round)
    since = last[0] + 1 if last else 0
    places = {(r, s) for r in range(since, round + 1) for s in TRAIN_STAGES}
    if last:
        places |= {(int(k["round"]), str(k["stage"])) for k in last[1]["kept"]}
    found = [f for r, s in places if r <= round and (f := _committed(cs, r, s)) is not None]
    found.sort(key=lambda f: f[0].order, reverse=True)
    return [c for c, pruned in found if not pruned], [c for c, pruned in found if pruned]


def needed_weights(ctx: RoundContext, published: WeightsRef) -> list[WeightsRef]:
    """What a round may still read after round ``ctx.round`` published ``published``: those
    weights, and for round R, R+1 and every round between R - ``run.overlap`` and R that is
    not complete, the weights it serves, trains from and published (those committed)."""
    cs, r, overlap = ctx.store, ctx.round, ctx.config.run.overlap
    rounds = {r, r + 1} | {q for q in range(max(0, r - overlap), r) if not round_complete(cs, q)}
    needed = {published}
    for q in sorted(rounds):
        for source in {q - 1 - overlap, q - 1, q}:  # served, trained from, published
            if 0 <= source <= r and (weights := published_weights(cs, source)) is not None:
                needed.add(weights)
    return sorted(needed, key=lambda w: w.version)


def _needed(checkpoint: Checkpoint, needed: list[WeightsRef]) -> bool:
    """Whether weights a round may read are this checkpoint's: by its URI or its version
    (either matching keeps it)."""
    w = checkpoint.weights
    return any(n.checkpoint == w.checkpoint or n.version == w.version for n in needed)


def _prune(ctx: RoundContext, checkpoint: Checkpoint, keep_last: int) -> list[str]:
    """Delete one checkpoint, its tombstone written first; returns the staged copies removed."""
    cs = ctx.store
    record = checkpoint.to_dict() | {
        "pruned_after_round": ctx.round,
        "keep_last": keep_last,
        "at": utc_now(),
    }
    cs.store.write_json(cs.layout.stage_key(checkpoint.round, checkpoint.stage, PRUNED), record)
    log.info("pruning %s (%s)", checkpoint.weights.checkpoint, checkpoint.weights.version)
    return _delete(ctx, checkpoint)


def _delete(ctx: RoundContext, checkpoint: Checkpoint) -> list[str]:
    """Delete the checkpoint's folder from the store and its staged copy from this machine
    (either may be gone already); returns the staged copies removed."""
    from spade.inference.pool import staged_folder

    cs = ctx.store
    cs.store.delete(cs.layout.stage_key(checkpoint.round, checkpoint.stage, "checkpoint"))
    if checkpoint.weights.checkpoint is None:
        return []
    folder = staged_folder(checkpoint.weights)
    if not folder.is_dir():
        return []
    shutil.rmtree(folder)
    log.info("removed the staged copy %s", folder)
    return [str(folder)]


def retain_checkpoints(ctx: RoundContext, published: WeightsRef) -> dict[str, Any] | None:
    """The pass after round ``ctx.round`` published ``published``: delete the checkpoints
    beyond the newest ``checkpoints.keep_last`` that no round needs (:func:`needed_weights`),
    and their staged copies. Returns the record to store (``retention.json``); None when
    nothing is to be done (``keep_last`` unset, or a newer round has published)."""
    keep_last = ctx.config.checkpoints.keep_last
    cs, r = ctx.store, ctx.round
    if keep_last is None:
        return None
    if published_weights(cs, r + 1) is not None:
        log.info("round %d is not the newest published round: no checkpoint pruned", r)
        return None
    needed = needed_weights(ctx, published)
    candidates, unfinished = _candidates(cs, r)
    kept = [c for i, c in enumerate(candidates) if i < keep_last or _needed(c, needed)]
    pruned = [c for c in candidates if c not in kept]
    # what an interrupted pass left is finished (deleting what is gone already costs a listing)
    staged = [folder for c in unfinished for folder in _delete(ctx, c)]
    staged += [folder for c in pruned for folder in _prune(ctx, c, keep_last)]
    gone = sorted(pruned + unfinished, key=lambda c: c.order)
    if gone:
        versions = ", ".join(c.weights.version for c in gone)
        log.warning("round %d: pruned %d checkpoint(s): %s", r, len(gone), versions)
    return {
        "keep_last": keep_last,
        "needed": [w.to_dict() for w in needed],
        "kept": [c.to_dict() for c in kept],
        "pruned": [c.to_dict() for c in gone],
        "staged_removed": staged,
        "at": utc_now(),
    }


def retention_note(record: dict[str, Any]) -> str:
    """One line for the publish manifest's note."""
    pruned = [p["version"] for p in record["pruned"]]
    kept = ", ".join(k["version"] for k in record["kept"]) or "none"
    what = f"pruned {len(pruned)} checkpoint(s) ({', '.join(pruned)})" if pruned else "pruned none"
    return f"checkpoints.keep_last {record['keep_last']}: {what}; kept {kept}"


def pruned_record(cs: CampaignStore, weights: WeightsRef) -> dict[str, Any] | None:
    """The record of ``weights``' checkpoint's pruning (:data:`PRUNED`), or None when it was
    not pruned (or is not a checkpoint of this campaign's training stages)."""
    m = _VERSION.fullmatch(weights.version)
    if weights.checkpoint is None or m is None:
        return None
    key = cs.layout.stage_key(int(m[1]), f"train_{m[2]}", PRUNED)
    if not cs.store.exists(key):
        return None
    record: dict[str, Any] = cs.store.read_json(key)
    return record if record.get("checkpoint") == weights.checkpoint else None


def check_not_pruned(cs: CampaignStore, weights: WeightsRef) -> None:
    """CheckpointError naming the pass that pruned ``weights``' checkpoint, if one did."""
    if (record := pruned_record(cs, weights)) is not None:
        raise CheckpointError(
            f"weights {weights.version} ({weights.checkpoint}) were pruned after round"
            f" {record['pruned_after_round']} (checkpoints.keep_last {record['keep_last']},"
            f" {record['at']}); they can no longer be served or trained from"
        )


__all__ = [
    "PRUNED",
    "RETENTION",
    "Checkpoint",
    "check_not_pruned",
    "needed_weights",
    "pruned_record",
    "retain_checkpoints",
    "retention_note",
]
