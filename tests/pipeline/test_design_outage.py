"""An inference outage on the designer's side never poisons its data (issue 12, finding 7).

The design half of a round runs stage by stage (documents, design, verify in nsjail, settle,
repair, hint) against the OpenAI stand-in, whose requests for one slot's document fail; the
evaluations are fixed numbers per environment (the agent's plays are not what is tested here).
A failed attempt is counted and absent from the designer's rewards, its training batch and the
memory, which equal those of a round that never asked for that slot; past
``designer.max_failed_share`` the design or repair stage raises InferenceError (so Prefect
retries it) and commits nothing, and so does the hint stage when a failed request leaves a
design without a hint.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spade.config import CampaignConfig, load_config
from spade.designer.corpus import Corpus
from spade.designer.designer import awaiting_verdict, env_id_for, needs_repair, round_documents
from spade.errors import InferenceError
from spade.inference.factory import open_backend
from spade.pipeline.context import RoundContext
from spade.pipeline.design import design, repair
from spade.pipeline.documents import sample_documents
from spade.pipeline.hint import hint
from spade.pipeline.memory import remember
from spade.pipeline.record import campaign_store, read_jsonl
from spade.pipeline.replay import plan_round
from spade.pipeline.score import score_round
from spade.pipeline.state import delayed_designer_batch, initial_memory
from spade.pipeline.summary import summarize_round
from spade.pipeline.verify import settle, verify
from spade.records import DesignAttempt, EnvEvaluation
from spade.testing.openai_server import FakeOpenAIServer
from tests.designer.test_design_batch import (
    BACKWARDS,
    CLEAN_HINT,
    CODE_BREAKER,
    NO_CODE,
    fenced,
    write_corpus,
)

CODE_A = CODE_BREAKER.replace("CodeBreakerEnv", "AlphaBreakerEnv")
CODE_B = CODE_BREAKER.replace("CodeBreakerEnv", "BravoBreakerEnv")


def _document(body: dict[str, Any]) -> str:
    """The doc id (``docNN``) of a design or repair request's grounding document."""
    found = re.search(r"<document>\nDOC(\d+)", body["messages"][1]["content"])
    assert found is not None, body["messages"][1]["content"][:200]
    return f"doc{found.group(1)}"


def _is_hint(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith("You coach")


class Designer:
    """Answers design requests by their document (``answers``), repair turns with
    ``repairs`` (default: the answer again) and hint requests with a clean hint."""

    def __init__(self, answers: dict[str, str], repairs: dict[str, str] | None = None) -> None:
        self.answers, self.repairs = answers, repairs or {}

    def __call__(self, body: dict[str, Any]) -> str:
        if _is_hint(body):
            return CLEAN_HINT
        doc = _document(body)
        if len(body["messages"]) > 2:  # a repair turn
            return self.repairs.get(doc, self.answers[doc])
        return self.answers[doc]


class OutageServer(FakeOpenAIServer):
    """The stand-in, answering 500 to every chat request ``down`` picks."""

    def __init__(self, script: Designer, down: Callable[[dict[str, Any]], bool]) -> None:
        super().__init__(script=script)
        self.down = down

    def _chat_with_fault(self, h: Any, body: dict[str, Any], fault: str) -> None:
        super()._chat_with_fault(h, body, "500" if self.down(body) else fault)


def _healthy(body: dict[str, Any]) -> bool:
    return False


def _config(server: FakeOpenAIServer, tmp_path: Path, **designer: object) -> CampaignConfig:
    corpus = tmp_path / "corpus.jsonl"
    if not corpus.exists():
        write_corpus(corpus)
    return load_config(
        overrides={
            **server.overrides(),
            "inference.max_retries": 0,
            "corpus.path": str(corpus),
            "storage.root": str(tmp_path / "store"),
            "designer.envs_per_round": 3,
            "designer.attempts_per_slot": 1,
            "designer.active_skills": 1,  # one skill: every reward is centred with the others
            "designer.repair_turns": 0,
            "training.designer_delay_steps": 0,
            **{f"designer.{k}": v for k, v in designer.items()},
        }
    )


def _slot_documents(cfg: CampaignConfig) -> list[str]:
    """The doc ids slots 0, 1, 2 design from in round 0."""
    return [d.doc_id for d in round_documents(Corpus.load(cfg.corpus), cfg, 0)[:3]]


def _settled(ctx: RoundContext, batch: list[DesignAttempt]) -> list[DesignAttempt]:
    todo = awaiting_verdict(batch)
    verdicts = [verify(ctx, a.code or "", a.references) for a in todo]
    return settle(ctx, [], batch, verdicts)[0]


async def _design_half(cfg: CampaignConfig, cid: str, slots: list[int]) -> list[DesignAttempt]:
    """Round 0's design stages for ``slots``, as the round flow runs them."""
    ctx = RoundContext.open(cfg, cid, 0)
    documents = sample_documents(ctx, plan_round(ctx))
    async with open_backend(cfg) as backend:
        batch = await design(ctx, 0, slots, documents, initial_memory(cfg), backend)
        batch = _settled(ctx, batch)
        for turn in range(cfg.designer.repair_turns):
            if not any(needs_repair(a) for a in batch):
                break
            batch = _settled(ctx, await repair(ctx, 0, turn, batch, backend))
        return await hint(ctx, batch, backend)


def _evaluations(attempts: list[DesignAttempt]) -> list[EnvEvaluation]:
    """Fixed numbers for every accepted design: win rate 0.5, regret 0.15 (blend reward 1)."""
    return [
        EnvEvaluation(str(a.env_id), a.skill, [1.0], [0.0], 0.5, 1.0, 0.15, 0)
        for a in attempts
        if a.accepted
    ]


def _round(
    tmp_path: Path, cid: str, script: Designer, down: Callable[[dict[str, Any]], bool], **kw: Any
) -> dict[str, Any]:
    """One round's design half, scored and remembered: what the designer's data became."""
    slots = kw.pop("slots", [0, 1, 2])
    with OutageServer(script, down) as server:
        cfg = _config(server, tmp_path, **kw)
        attempts = asyncio.run(_design_half(cfg, cid, slots))
    evaluations = _evaluations(attempts)
    ctx = RoundContext.open(cfg, cid, 0)
    score_round(ctx, attempts, evaluations, {})
    memory = remember(ctx, initial_memory(cfg), attempts, evaluations)
    cs = ctx.store
    delayed = delayed_designer_batch(ctx)
    assert delayed is not None
    return {
        "attempts": attempts,
        "scored": read_jsonl(cs, cs.layout.stage_key(0, "score", "scored.jsonl")),
        "memory": memory,
        "batch": [(a.slot, a.env_id, a.accepted, a.token_ids) for a in delayed[1]],
        "rewards": delayed[2],
        "summary": summarize_round(cs, 0),
    }


OUTAGES = {
    # stage: (answers of slots 0, 1, 2; repair answers; the request of slot 1 that fails)
    "design": ([fenced(CODE_A), fenced(CODE_B), NO_CODE], {}, lambda b: len(b["messages"]) == 2),
    "repair": (
        [fenced(CODE_A), fenced(BACKWARDS), NO_CODE],  # slot 1: infeasible, then repaired
        {1: fenced(CODE_B)},
        lambda b: len(b["messages"]) > 2,
    ),
}


def _outage(tmp_path: Path, stage: str) -> tuple[Designer, Callable[[dict[str, Any]], bool]]:
    """The scripted designer of ``stage``'s outage (answers keyed by each slot's document) and
    the test of a request that fails: slot 1's request of that stage (never a hint request)."""
    answers, repairs, request = OUTAGES[stage]
    with FakeOpenAIServer() as probe:
        docs = _slot_documents(_config(probe, tmp_path))
    script = Designer(
        dict(zip(docs, answers, strict=True)), {docs[s]: t for s, t in repairs.items()}
    )

    def slot1_down(body: dict[str, Any]) -> bool:
        return not _is_hint(body) and _document(body) == docs[1] and request(body)

    return script, slot1_down


@pytest.mark.attack
@pytest.mark.sandbox
@pytest.mark.parametrize("stage", sorted(OUTAGES))
def test_an_outage_leaves_the_designers_rewards_batch_and_memory_as_if_unasked(tmp_path, stage):
    script, slot1_down = _outage(tmp_path, stage)
    kw = {"repair_turns": 1 if stage == "repair" else 0, "max_failed_share": 0.5}
    outage = _round(tmp_path, "outage", script, slot1_down, **kw)
    unasked = _round(tmp_path, "unasked", script, _healthy, slots=[0, 2], **kw)
    whole = _round(tmp_path, "whole", script, _healthy, **kw)

    failed = outage["attempts"][1]
    assert failed.failed and failed.failure_kind == "inference" and not failed.accepted
    assert "500" in (failed.failure_reason or "")
    if stage == "repair":  # the code it was repairing stays, for the record
        assert failed.code == BACKWARDS and (failed.verdict or {}).get("failed_check")
    # counted: a row that says so, and failed_designs in the summary
    (row,) = [r for r in outage["scored"] if r["failed"]]
    assert (row["slot"], row["reward"], row["raw_reward"]) == (1, None, None)
    assert outage["summary"]["failed_designs"] == 1 and unasked["summary"]["failed_designs"] == 0
    # absent: everything else is what a round that never asked for slot 1 made
    assert [r for r in outage["scored"] if not r["failed"]] == unasked["scored"]
    assert outage["batch"] == unasked["batch"] and outage["rewards"] == unasked["rewards"]
    assert outage["memory"] == unasked["memory"]
    keys = ("attempts", "accepted", "rejections", "designer_reward", "designer_spread")
    assert {k: outage["summary"][k] for k in keys} == {k: unasked["summary"][k] for k in keys}
    # and slot 1 matters when it is answered: scored as a rejection (-1 for "no code", the
    # old treatment of an outage) it would have moved every centred reward (the batch's
    # rewards are uncentred: training centres them; the score rows keep the centred ones)
    assert whole["scored"][0]["reward"] != unasked["scored"][0]["reward"]


@pytest.mark.sandbox
@pytest.mark.parametrize("stage", sorted(OUTAGES))
def test_past_the_threshold_the_stage_raises_and_commits_nothing(tmp_path, stage):
    script, slot1_fails = _outage(tmp_path, stage)
    outage = True

    def slot1_down(body: dict[str, Any]) -> bool:
        return outage and slot1_fails(body)

    turns = 1 if stage == "repair" else 0
    with OutageServer(script, slot1_down) as server:
        cfg = _config(server, tmp_path, repair_turns=turns)  # max_failed_share 0.25
        assert cfg.designer.max_failed_share == 0.25
        with pytest.raises(InferenceError, match=rf"1 of \d {stage} requests failed"):
            asyncio.run(_design_half(cfg, "c", [0, 1, 2]))
        manifest = campaign_store(cfg, "c").read_stage_manifest(0, "design")
        if stage == "design":
            assert manifest is None  # nothing of the failed stage is stored
        else:  # the design commit stands; the failed repair turn's file is not in it
            assert manifest is not None and "attempt-0.jsonl" in manifest.outputs
            assert "attempt-0-repair-0.jsonl" not in manifest.outputs
        outage = False  # the server is back: the stage's retry completes
        attempts = asyncio.run(_design_half(cfg, "c", [0, 1, 2]))
    assert not any(a.failed for a in attempts)
    assert attempts[1].accepted and attempts[1].code == CODE_B  # designed, or repaired


def test_a_hint_lost_to_an_outage_fails_the_hint_stage(tmp_path):
    """Without a hint a design has no hinted plays and its regret reads 0: the stage raises."""
    code = CODE_A
    attempt = DesignAttempt(0, 0, "s", "doc00", [], code=code, env_id=env_id_for(code))
    attempt.accepted = True
    with OutageServer(Designer({}), _is_hint) as server:
        cfg = _config(server, tmp_path)
        tries = cfg.designer.hint_tries

        async def go() -> None:
            async with open_backend(cfg) as backend:
                await hint(RoundContext.open(cfg, "c", 0), [attempt], backend)

        with pytest.raises(InferenceError, match="1 of 1 accepted designs got no hint"):
            asyncio.run(go())
        assert len(server.chat_requests) == tries  # asked again first, like an empty hint
    assert campaign_store(cfg, "c").read_stage_manifest(0, "hint") is None
