"""Pieces of the round flow that need neither a Prefect API nor a jail."""

from __future__ import annotations

import pytest

from flows.round import (
    DESIGN_CODE,
    EVALUATE_CODE,
    SCORE_CODE,
    StageCode,
    accepted_specs,
    results_path,
)
from spade.config import load_config
from spade.designer.designer import DesignAttempt
from spade.errors import ConfigError


def test_results_live_under_the_storage_root(tmp_path):
    cfg = load_config(overrides={"name": "c1", "storage.root": str(tmp_path)})
    assert results_path(cfg) == tmp_path.resolve() / "c1" / "prefect-results"
    cfg = load_config(overrides={"name": "c1", "storage.root": f"file://{tmp_path}"})
    assert results_path(cfg) == tmp_path.resolve() / "c1" / "prefect-results"


def test_a_remote_root_is_refused_clearly_for_now():
    cfg = load_config(overrides={"storage.root": "s3://bucket/prefix"})
    with pytest.raises(ConfigError, match="local path"):
        results_path(cfg)


def test_stage_code_keys_follow_the_library_source():
    keys = [p.compute_key(None, {}, {}) for p in (DESIGN_CODE, EVALUATE_CODE, SCORE_CODE)]  # type: ignore[arg-type]
    assert all(k and len(k) == 16 for k in keys) and len(set(keys)) == 3
    assert StageCode().compute_key(None, {}, {}) is None  # type: ignore[arg-type]
    one = StageCode(modules=("spade.scoring",)).compute_key(None, {}, {})  # type: ignore[arg-type]
    assert one != SCORE_CODE.compute_key(None, {}, {})  # type: ignore[arg-type]


def test_only_accepted_designs_are_evaluated():
    ok = DesignAttempt(0, 0, "logic", "d0", [], code="class AEnv: ...", env_id="env-a")
    ok.accepted, ok.hint = True, "think"
    bad = DesignAttempt(1, 0, "logic", "d1", [], code="x", env_id="env-b", failure_kind="parse")
    specs = accepted_specs([ok, bad])
    assert [(s.env_id, s.hint, s.skill) for s in specs] == [("env-a", "think", "logic")]
