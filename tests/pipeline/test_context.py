"""The round context: built once per round with the config's store options and its policy, and
the only place a stage gets them from (no stage reloads the policy or rebuilds the store)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect

import pytest

from spade.config import load_config
from spade.pipeline import context
from spade.pipeline.context import RoundContext
from spade.pipeline.keys import STAGE_ENTRIES
from spade.records import BASE, WeightsRef
from spade.sandbox.policy import policy_source
from spade.storage.version import SPADE_ROOT

PURE_ENTRIES = {"spade.pipeline.pool:needs_model"}  # reads its argument only: no round
REBUILDS = {"load_policy", "campaign_store", "ObjectStore", "CampaignStore"}


def test_open_builds_the_store_with_the_storage_options_and_loads_the_policy_once(
    tmp_path, monkeypatch
):
    cfg = load_config(
        overrides={"storage.root": str(tmp_path), "storage.storage_options": {"auto_mkdir": True}}
    )
    loads = []
    real = context.load_policy
    monkeypatch.setattr(context, "load_policy", lambda path=None: loads.append(path) or real(path))
    ctx = RoundContext.open(cfg, "c1", 3)
    assert loads == [cfg.sandbox.policy_path]
    assert ctx.store.store.storage_options == {"auto_mkdir": True}
    assert ctx.store.layout.campaign_id == "c1" and ctx.round == 3 and ctx.weights == BASE
    assert ctx.policy_sha256 == policy_source(ctx.policy).sha256
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.round = 4  # type: ignore[misc]
    served = ctx.serving(WeightsRef("r0002-designer", "ckpt"))
    assert served.weights.version == "r0002-designer" and ctx.weights == BASE
    assert served.store is ctx.store and served.policy is ctx.policy  # shared, not rebuilt
    assert loads == [cfg.sandbox.policy_path]


def test_no_stage_module_reloads_the_policy_or_rebuilds_the_store():
    builders = {"context.py", "record.py"}  # the context, and the store it is built with
    found = []
    for path in sorted((SPADE_ROOT / "pipeline").glob("*.py")):
        if path.name in builders:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name in REBUILDS:
                    found.append(f"{path.name}:{node.lineno} {name}")
    assert found == []


def test_every_stage_entry_takes_the_round_context_first():
    entries = {e for es in STAGE_ENTRIES.values() for e in es if e.startswith("spade.pipeline.")}
    for entry in sorted(entries - PURE_ENTRIES):
        module, _, name = entry.partition(":")
        params = list(inspect.signature(getattr(importlib.import_module(module), name)).parameters)
        assert params[:1] == ["ctx"], entry
        hints = inspect.get_annotations(getattr(importlib.import_module(module), name))
        assert hints["ctx"] == "RoundContext", entry
