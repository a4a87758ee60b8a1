"""The verify stage's manifest records the sandbox policy in force: its file and sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path

from spade.config import load_config
from spade.pipeline.context import RoundContext
from spade.pipeline.record import campaign_store
from spade.pipeline.verify import settle
from spade.records import DesignAttempt

REPO = Path(__file__).resolve().parents[2]


def test_the_verify_manifest_records_the_policy_file_and_its_digest(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_bytes((REPO / "infra" / "sandbox.yaml").read_bytes() + b"# a copy\n")
    cfg = load_config(
        overrides={"storage.root": str(tmp_path / "store"), "sandbox.policy_path": str(policy)}
    )
    failed = DesignAttempt(slot=0, attempt=0, skill="s", doc_id="d", messages=[])  # no code
    settle(RoundContext.open(cfg, "c", 0), [], [failed], [])
    manifest = campaign_store(cfg, "c").read_stage_manifest(0, "verify")
    assert manifest is not None
    assert manifest.inputs == {
        "served": "base",  # round 0 serves the base weights, nothing newer exists
        "staleness": "0",
        "sandbox_policy": str(policy),
        "sandbox_policy_sha256": hashlib.sha256(policy.read_bytes()).hexdigest(),
    }
