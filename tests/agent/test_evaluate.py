"""Hinted and unhinted plays through the campaign config, against real jails and the stand-in."""

from __future__ import annotations

import asyncio

import pytest

from spade.agent.evaluate import EnvSpec, evaluate_envs, rollout_settings
from spade.config import load_config
from spade.errors import ConfigError
from spade.inference.factory import open_backend
from spade.sandbox.policy import load_policy
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.scripted_designer import SKY


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
                return await evaluate_envs(backend, specs, cfg, load_policy())

        plain, hinted = asyncio.run(go())
    assert server.max_in_flight == 2  # 8 episodes, two live at a time (the default is 64)
    assert plain.hinted_returns == [] and plain.hinted_win_rate is None
    assert plain.win_rate == 1.0 and plain.regret == 0.0
    assert plain.summary()["hinted_win_rate"] is None
    assert hinted.hinted_returns == [1.0, 1.0] and hinted.hinted_win_rate == 1.0
