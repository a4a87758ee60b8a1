"""designer -> verify -> hint -> evaluate -> score, end to end, against a scripted
OpenAI-compatible stand-in on loopback (the only fake: it stands where vLLM would)."""

from __future__ import annotations

import asyncio

import pytest

from spade.agent.evaluate import evaluate_envs
from spade.config import load_config
from spade.curriculum.memory import EnvironmentMemory
from spade.designer.corpus import Corpus
from spade.designer.designer import design_batch
from spade.inference.factory import open_backend
from spade.records import EnvSpec
from spade.sandbox.policy import load_policy
from spade.scoring.outcomes import memory_records, score
from spade.testing.scripted_designer import check_expected_round, env_class

pytestmark = pytest.mark.sandbox


async def _round(cfg):
    policy = load_policy()
    async with open_backend(cfg) as backend:
        attempts = await design_batch(
            backend, Corpus.load(cfg.corpus), EnvironmentMemory(cfg.memory), cfg, policy
        )
        accepted = [a for a in attempts if a.accepted]
        specs = [EnvSpec(a.env_id, a.code, a.skill, a.hint, a.tool_use) for a in accepted]
        evaluations = await evaluate_envs(backend, specs, cfg, policy, round=0)
    return attempts, evaluations


def test_scripted_round_gives_the_exact_regrets(scripted_overrides):
    cfg = load_config(overrides=scripted_overrides)
    attempts, evaluations = asyncio.run(_round(cfg))

    # Designs: 3 accepted, the infeasible one and the code-less one kept as data; the
    # regrets the script implies, exactly.
    by_class = check_expected_round(attempts, evaluations)
    assert all(a.hint and a.hint_note is None for a in attempts if a.accepted)
    plays = (cfg.evaluation.unhinted_plays, cfg.evaluation.hinted_plays)
    for ev in by_class.values():
        assert (len(ev.unhinted_returns), len(ev.hinted_returns)) == plays
        assert ev.failed_plays == 0

    # Designer rewards (blend, centred per skill), by hand:
    #   SkyWord: 0.6*plateau(0) + 0.4*clip(1.0/0.15) = 0.4; Half: 0.6*1 + 0.4*1 = 1.0; Metal: 0.
    #   invalid designs: 0. math = [0.4, 0, 0] -> mean 0.4/3; logic [0] -> 0; spatial [1.0] -> 0.
    scored, _ = score(attempts, evaluations, cfg.scoring)
    rewards = {}
    for s in scored:
        name = env_class(s.attempt.code) if s.attempt.accepted else s.attempt.failure_kind
        rewards[name] = s.reward
    assert rewards["SkyWordEnv"] == pytest.approx(0.4 - 0.4 / 3)
    assert rewards["infeasible"] == pytest.approx(-0.4 / 3) and rewards["parse"] == pytest.approx(
        -0.4 / 3
    )
    assert rewards["MetalEnv"] == pytest.approx(0.0) and rewards["HalfEnv"] == pytest.approx(0.0)

    records = memory_records(attempts, evaluations, round_index=0)
    assert sorted((r.skill, r.regret) for r in records) == [
        ("logical_deduction", 0.0),
        ("mathematical_reasoning", 1.0),
        ("spatial_reasoning", 0.5),
    ]


def test_trajectories_keep_tokens_logprobs_and_the_hint(scripted_server, scripted_overrides):
    server = scripted_server
    cfg = load_config(overrides=scripted_overrides)
    _, evaluations = asyncio.run(_round(cfg))
    trajs = [t for ev in evaluations for t in ev.trajectories]
    assert len(trajs) == 3 * (cfg.evaluation.unhinted_plays + cfg.evaluation.hinted_plays)
    for t in trajs:
        assert t.status == "terminated" and t.model == server.model
        first_obs = t.messages[1]["content"]
        assert ("HINT: " in first_obs) == t.hinted
        for turn in t.turns:
            assert turn.completion_token_ids and len(turn.logprobs) == len(
                turn.completion_token_ids
            )
            assert turn.prompt_token_ids
