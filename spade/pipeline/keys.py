"""What each stage's result depends on: the config sections it reads and the code it runs.

A stage's cache key is built from these (plus its data inputs), so a change to the training
config does not re-run the design stage, and a change to the verifier's code re-runs verify and
what follows it, not the design before it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from spade.config import CampaignConfig
from spade.storage.version import code_version

STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    "sample_documents": ("seed", "corpus", "designer"),
    "design": ("seed", "model", "corpus", "designer", "memory"),
    "verify": ("sandbox",),
    "hint": ("model", "designer"),
    "pool": (
        "seed",
        "model",
        "designer",
        "sandbox",
        "run.env_source",
        "run.env_pool",
        "run.min_envs",
        "run.heldout_envs",
    ),
    "evaluate": ("seed", "model", "evaluation", "scoring"),
    "score": ("scoring", "evaluation"),
    "memory": ("memory",),
    "train_agent": ("seed", "model", "training"),
    "train_designer": ("seed", "model", "training"),
    "publish": ("model", "training"),
    "heldout": (
        "model",
        "evaluation",
        "run.heldout_envs",
        "run.heldout_suites",
        "run.heldout_plays",
    ),
}
"""Config fields each stage's result depends on, top-level or dotted (``inference``,
``storage`` and ``metrics`` are where work runs or is reported, not what it computes, so they
are in no key)."""

STAGE_MODULES: dict[str, tuple[str, ...]] = {
    "sample_documents": ("spade.designer.corpus", "spade.pipeline.design"),
    "design": (
        "spade.designer.designer",
        "spade.designer.extract",
        "spade.designer.prompts",
        "spade.designer.skills",
        "spade.curriculum.memory",
        "spade.envs.prelude",
        "spade.pipeline.design",
    ),
    "verify": (
        "spade.verify.checks",
        "spade.verify.episodes",
        "spade.verify.static",
        "spade.verify.verifier",
        "spade.sandbox.server",
        "spade.pipeline.design",
    ),
    "hint": ("spade.designer.prompts", "spade.designer.extract", "spade.pipeline.design"),
    "pool": (
        "spade.pipeline.pool",
        "spade.designer.prompts",
        "spade.designer.extract",
        "spade.curriculum.memory",
    ),
    "evaluate": (
        "spade.agent.evaluate",
        "spade.agent.rollout",
        "spade.agent.trajectory",
        "spade.agent.actions",
        "spade.agent.prompts",
        "spade.curriculum.regret",
        "spade.pipeline.evaluate",
    ),
    "score": ("spade.scoring", "spade.curriculum.rewards", "spade.pipeline.score"),
    "memory": ("spade.curriculum.memory", "spade.scoring", "spade.pipeline.score"),
    "train_agent": (
        "spade.training.samples",
        "spade.training.advantages",
        "spade.training.loss",
        "spade.training.trainer",
        "spade.pipeline.train",
    ),
    "train_designer": (
        "spade.training.samples",
        "spade.training.advantages",
        "spade.training.loss",
        "spade.training.trainer",
        "spade.pipeline.train",
    ),
    "publish": ("spade.pipeline.train",),
    "heldout": (
        "spade.agent.evaluate",
        "spade.agent.rollout",
        "spade.agent.trajectory",
        "spade.agent.actions",
        "spade.agent.prompts",
        "spade.pipeline.heldout",
        "spade.eval.base",
        "spade.eval.runner",
        "spade.eval.reasoning_gym",
        "spade.eval.humaneval",
        "spade.eval.bfcl",
        "spade.eval.bfcl_data",
        "spade.eval.bfcl_runtime",
        "spade.eval.bfcl_mpmath",
    ),
}
"""The library modules whose source a stage's results depend on."""


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_hash(cfg: CampaignConfig, stage: str) -> str:
    """Hash of the config sections ``stage`` depends on (16 hex chars)."""
    dump = cfg.model_dump(mode="json")
    return _digest({name: _field(dump, name) for name in STAGE_SECTIONS[stage]})


def _field(dump: dict[str, Any], dotted: str) -> Any:
    node: Any = dump
    for key in dotted.split("."):
        node = node[key]
    return node


def stage_code_version(stage: str) -> str:
    """Hash of the source files of the modules ``stage`` runs (16 hex chars)."""
    return code_version(*STAGE_MODULES[stage])


def fingerprint(obj: Any) -> str:
    """A stable hash of JSON-able data (inputs of a stage that are not config)."""
    return _digest(obj)
