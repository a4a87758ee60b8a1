"""The verify stage: the verifier's checks on each design, in the sandbox, and the settling of
one attempt's designs with their verdicts.

A design's verdict is stored under its environment id, so verifying the same code twice in a
round writes one object; :func:`settle` commits the stage so far, with the digest of the
sandbox policy the round's designs were verified under.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

from spade.designer.designer import (
    apply_verdict,
    awaiting_verdict,
    env_id_for,
    open_slots_of,
    verify_design,
)
from spade.pipeline.context import RoundContext
from spade.pipeline.design import attempt_rows
from spade.pipeline.record import StageRecord, busy_seconds
from spade.pipeline.stage import Stage
from spade.pipeline.worker import ran_on
from spade.records import DesignAttempt, Verdict
from spade.sandbox.policy import policy_source


def verify(
    ctx: RoundContext,
    code: str,
    references: list[dict[str, str]] | None = None,
    runner: Mapping[str, Any] | None = None,
) -> Verdict:
    """The verifier's checks on one design, in the sandbox, compared with the ``references``
    it must not copy (``{"name", "code"}``); the verdict is stored by env id, with where it
    ran (``ran_on``: this process and the task ``runner``'s worker, see
    :mod:`spade.pipeline.worker`)."""
    started = time.time()
    verdict = verify_design(code, ctx.config, ctx.policy, references or ())
    cs = ctx.store
    key = cs.layout.stage_key(ctx.round, "verify", f"verdicts/{env_id_for(code)}.json")
    span = {"started": started, "finished": time.time(), "ran_on": ran_on(runner)}
    cs.store.write_json(key, verdict.to_dict() | {"failed_check": verdict.failed_check} | span)
    return verdict


def settle(
    ctx: RoundContext,
    earlier: list[DesignAttempt],
    batch: list[DesignAttempt],
    verdicts: list[Verdict],
) -> tuple[list[DesignAttempt], list[int]]:
    """Join one attempt's designs with their verdicts; commit the verify stage so far.

    ``verdicts`` line up with the designs in ``batch`` awaiting one (code, no verdict yet:
    :func:`~spade.designer.designer.awaiting_verdict`); ``earlier`` are the round's settled
    attempts before this one. Returns the settled batch and its slots still open (their design
    was rejected). The stage lists every verdict of the round, a repaired design's first one
    included, and ``attempts.jsonl`` holds ``earlier`` and the batch.
    """
    batch = copy.deepcopy(batch)
    pending = awaiting_verdict(batch)
    if len(pending) != len(verdicts):
        raise ValueError(f"{len(verdicts)} verdicts for {len(pending)} designs awaiting one")
    for att, verdict in zip(pending, verdicts, strict=True):
        apply_verdict(att, verdict)
    attempts = list(earlier) + batch
    # the policy verify ran with: the round's, loaded once
    inputs = {
        "sandbox_policy": policy_source(ctx.policy).path,
        "sandbox_policy_sha256": ctx.policy_sha256,
    }
    rec = StageRecord(ctx, "verify", inputs)
    spans = []
    for env_id in dict.fromkeys(i for a in attempts for i in _verified_ids(a)):
        rec.outputs[f"verdicts/{env_id}"] = key = rec.key(f"verdicts/{env_id}.json")
        spans.append(rec.cs.store.read_json(key))
    rec.write_jsonl("attempts.jsonl", attempt_rows(attempts))
    rec.commit(seconds=busy_seconds(spans))
    return batch, open_slots_of(batch)


def _verified_ids(att: DesignAttempt) -> list[str]:
    """Env ids of the attempt's verified designs: the first answer's (if repaired), the last."""
    ids = [env_id_for(att.first_code)] if att.first_code is not None else []
    return ids + ([att.env_id] if att.env_id is not None and att.verdict is not None else [])


STAGE = Stage(
    "verify",
    sections=("sandbox",),
    entries=("verify", "settle", "spade.pipeline.pool:verify_pool_env"),
)
