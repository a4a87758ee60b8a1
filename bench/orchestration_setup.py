"""What the orchestration benchmark (``bench/orchestration.py``) runs: the scripted stand-in
model and its config, or a real config; one ``round_flow`` call; and what it reads back (the
round's stage manifests, the stand-in's request count, a digest of the sources)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

HELDOUT_ENV = REPO / "spade" / "envs" / "examples" / "maze_walk.py"


def scripted_model() -> Any:
    """The integration tests' scripted model; as the agent of an environment it does not know
    (the held-out maze) it always walks east."""
    from spade.testing.scripted_designer import ScriptedModel

    class HeldoutScriptedModel(ScriptedModel):
        def play(self, messages: list[dict[str, Any]]) -> str:
            try:
                return super().play(messages)
            except AttributeError:  # no "Puzzle #": not one of the scripted designs
                return "\\boxed{E}"

    return HeldoutScriptedModel()


def scripted_config(server: Any, tmp: Path, root: Path, train: bool) -> Any:
    from spade.config import load_config
    from spade.testing.scripted_designer import (
        round_overrides,
        tiny_policy_overrides,
        write_corpus,
        write_tiny_policy,
    )

    corpus = tmp / "corpus.jsonl"
    if not corpus.exists():
        write_corpus(corpus)
    policy = tmp / "policy"
    if not policy.exists():
        write_tiny_policy(policy)
    return load_config(
        overrides={
            **round_overrides(server, corpus),
            "name": "bench-orchestration",
            "storage.root": str(root),
            **tiny_policy_overrides(policy),
            "run.heldout_envs": [str(HELDOUT_ENV)],
            "run.train": train,
            "run.rounds": 1,
        }
    )


def file_config(path: Path, root: Path, train: bool) -> Any:
    """``path`` with the store in ``root``; relative held-out paths resolved against the repo."""
    from spade.config import load_config

    heldout = [
        e if Path(e).expanduser().exists() or not (REPO / e).exists() else str(REPO / e)
        for e in load_config(path).run.heldout_envs
    ]
    overrides: dict[str, object] = {
        "storage.root": str(root),
        "run.rounds": 1,
        "run.heldout_envs": heldout,
    }
    if not train:
        overrides["run.train"] = False
    return load_config(path, overrides=overrides)


def run_round(cfg: Any, cid: str) -> tuple[Any, float]:
    """One ``round_flow`` call: its final state and wall time."""
    from flows.round import round_flow

    t0 = time.perf_counter()
    state = asyncio.run(round_flow(config=cfg, campaign_id=cid, round_index=0, return_state=True))
    return state, time.perf_counter() - t0


def close_backends() -> None:
    from spade.inference.pool import close_shared_backends

    asyncio.run(close_shared_backends())


def stage_manifests(cfg: Any, cid: str) -> dict[str, dict[str, Any]]:
    from spade.pipeline.record import campaign_store
    from spade.storage import STAGES

    cs = campaign_store(cfg, cid)
    out = {}
    for stage in STAGES:
        m = cs.read_stage_manifest(0, stage)
        if m is not None:
            out[stage] = {"seconds": m.seconds, "status": m.status}
    return out


def source_digest() -> str:
    """Hash of the ``spade`` and ``flows`` sources: cache keys hash code read from disk, so an
    edit during the benchmark changes them and the resume recomputes more than the last stage."""
    h = hashlib.sha256()
    for path in sorted([*(REPO / "spade").rglob("*.py"), *(REPO / "flows").rglob("*.py")]):
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def fresh_script(server: Any) -> None:
    """A new scripted model for a new campaign (the script counts the designs it wrote)."""
    if server is not None:
        server.script = scripted_model()


def requests_since(server: Any, before: int) -> int | None:
    """Chat requests the stand-in answered since it had answered ``before`` (None: no stand-in)."""
    return None if server is None else len(server.chat_requests) - before


def requests(server: Any) -> int:
    return 0 if server is None else len(server.chat_requests)
