"""Hinted and unhinted plays through the campaign config, against real jails and the stand-in."""

from __future__ import annotations

import asyncio

import pytest

from spade.agent.evaluate import evaluate_envs, rollout_settings
from spade.config import load_config
from spade.errors import ConfigError, InferenceError
from spade.inference.factory import open_backend
from spade.records import DesignAttempt, EnvSpec
from spade.sandbox.policy import load_policy
from spade.scoring.outcomes import memory_records, score
from spade.testing.openai_server import FakeOpenAIServer
from spade.testing.scripted_designer import SKY
from spade.training.samples import samples_from_trajectories


def test_parallel_episodes_is_a_bounded_config_field():
    cfg = load_config(overrides={"evaluation.max_parallel_episodes": 5})
    assert rollout_settings(cfg).max_parallel == 5
    assert rollout_settings(load_config()).max_parallel == 64
    for bad in (0, 100_000):
        with pytest.raises(ConfigError, match="max_parallel_episodes"):
            load_config(overrides={"evaluation.max_parallel_episodes": bad})


@pytest.mark.sandbox
def test_evaluation_respects_the_parallelism_and_has_no_hinted_rate_without_a_hint():
    with FakeOpenAIServer(script=lambda r: "\\boxed{azure}", latency_s=0.05) as server:
        cfg = load_config(
            overrides={
                **server.overrides(),
                "evaluation.unhinted_plays": 3,
                "evaluation.hinted_plays": 2,
                "evaluation.max_parallel_episodes": 2,
            }
        )
        specs = [
            EnvSpec("plain", SKY, "mathematical_reasoning", None),
            EnvSpec("hinted", SKY, "mathematical_reasoning", "a colour"),
        ]

        async def go():
            async with open_backend(cfg) as backend:
                return await evaluate_envs(backend, specs, cfg, load_policy(), round=0)

        plain, hinted = asyncio.run(go())
    assert server.max_in_flight == 2  # 8 episodes, two live at a time (the default is 64)
    assert plain.hinted_returns == [] and plain.hinted_win_rate is None
    assert plain.win_rate == 1.0 and plain.regret == 0.0
    assert plain.summary()["hinted_win_rate"] is None
    assert hinted.hinted_returns == [1.0, 1.0] and hinted.hinted_win_rate == 1.0


def _hint_script(request: dict) -> str:
    """Wins with the hint (the environment appends "HINT: ..." to its first observation),
    loses its three tries without: the regret is 1 on every instance."""
    first_obs = request["messages"][1]["content"]
    return "\\boxed{azure}" if "HINT:" in first_obs else "\\boxed{no}"


def _outage_config(server: FakeOpenAIServer, **more: object):
    return load_config(
        overrides={
            **server.overrides(),
            "inference.max_retries": 0,  # a failed request is a failed play at once
            "evaluation.unhinted_plays": 2,
            "evaluation.hinted_plays": 4,
            "evaluation.max_parallel_episodes": 1,  # job order = request order: faults land known
            **more,
        }
    )


def _evaluate(cfg, specs):
    async def go():
        async with open_backend(cfg) as backend:
            return await evaluate_envs(backend, specs, cfg, load_policy(), round=0)

    return asyncio.run(go())


SKY_HINTED = EnvSpec("sky", SKY, "mathematical_reasoning", "the colour of a clear sky")


@pytest.mark.sandbox
@pytest.mark.attack
def test_an_inference_outage_does_not_poison_win_rates_regret_ema_memory_or_training():
    """Issue 12: a failed request used to be a play with return 0 in every number. Here one
    unhinted play fails on its second turn and one hinted play on its first (500s at known
    requests): both are counted, and every measure equals a run without the outage."""
    with FakeOpenAIServer(script=_hint_script) as server:
        (clean,) = _evaluate(_outage_config(server), [SKY_HINTED])
    # requests: u0 = 0 (ok), 1 (500); u1 = 2-4; h0 = 5; h1 = 6 (500); h2 = 7; h3 = 8
    faults = ["ok", "500", "ok", "ok", "ok", "ok", "500"]
    with FakeOpenAIServer(script=_hint_script, faults=faults) as server:
        (hit,) = _evaluate(
            _outage_config(server, **{"evaluation.max_failed_share": 0.5}), [SKY_HINTED]
        )
    failed = [t for t in hit.trajectories if t.failed]
    assert [(t.hinted, len(t.turns)) for t in failed] == [(False, 1), (True, 0)]
    assert {t.failure["kind"] for t in failed} == {"server_error"}
    assert (hit.failed_plays, clean.failed_plays, hit.env_failed_plays) == (2, 0, 0)
    assert hit.summary()["failed_plays"] == 2
    assert (hit.unhinted_returns, hit.hinted_returns) == ([0.0], [1.0, 1.0, 1.0])
    for measure in ("win_rate", "hinted_win_rate", "regret"):
        assert getattr(hit, measure) == getattr(clean, measure), measure
    assert (clean.win_rate, clean.hinted_win_rate, clean.regret) == (0.0, 1.0, 1.0)
    attempt = DesignAttempt(
        slot=0, attempt=0, skill="mathematical_reasoning", doc_id="d", messages=[],
        code=SKY, env_id="sky", accepted=True, hint=SKY_HINTED.hint,
    )  # fmt: skip
    config = load_config().scoring
    ema = {"mathematical_reasoning": 0.5}
    assert score([attempt], [hit], config, ema)[1] == score([attempt], [clean], config, ema)[1]
    assert [s.reward for s in score([attempt], [hit], config, ema)[0]] == [
        s.reward for s in score([attempt], [clean], config, ema)[0]
    ]
    assert memory_records([attempt], [hit], 0) == memory_records([attempt], [clean], 0)
    # training: the failed unhinted play's turn is not a sample (one per turn: the fake's
    # chat rendering is not prefix-stable), the completed unhinted play's three turns are
    samples = samples_from_trajectories(hit.trajectories)
    assert len(samples) == sum(len(t.turns) for t in hit.trajectories if not t.hinted) - 1 == 3


@pytest.mark.sandbox
def test_past_the_failed_share_the_evaluation_raises_so_the_stage_is_retried():
    # 2 of 6 plays fail: over the default 0.25
    plan = ["500", "ok", "ok", "ok", "500"]
    with (
        FakeOpenAIServer(script=_hint_script, faults=plan) as server,
        pytest.raises(InferenceError, match=r"2 of 6 plays of sky failed.*share 0\.33"),
    ):
        _evaluate(_outage_config(server), [SKY_HINTED])
    # the server down altogether
    with (
        FakeOpenAIServer(script=_hint_script, faults=["500"] * 6) as server,
        pytest.raises(InferenceError, match="6 of 6 plays"),
    ):
        _evaluate(_outage_config(server), [SKY_HINTED])


@pytest.mark.sandbox
def test_a_group_whose_every_play_failed_raises_whatever_the_share():
    """One unhinted play among many hinted ones: its failure is a small share, but without it
    there is no unhinted win rate to report (0.0 would be the outage speaking)."""
    with FakeOpenAIServer(script=_hint_script, faults=["500"]) as server:
        cfg = _outage_config(
            server, **{"evaluation.unhinted_plays": 1, "evaluation.max_failed_share": 1.0}
        )
        with pytest.raises(InferenceError, match="every unhinted play failed"):
            _evaluate(cfg, [SKY_HINTED])


def test_the_failed_share_is_a_bounded_config_field():
    assert load_config().evaluation.max_failed_share == 0.25
    for bad in (-0.1, 1.5):
        with pytest.raises(ConfigError, match="max_failed_share"):
            load_config(overrides={"evaluation.max_failed_share": bad})
