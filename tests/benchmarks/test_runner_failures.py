"""A held-out suite's plays that failed on the inference side: counted, left out of the
suite's score, and past the threshold the play raises (the heldout stage is retried)."""

from __future__ import annotations

import asyncio

import pytest

from spade.benchmarks.base import get_suite
from spade.benchmarks.runner import SuiteResult, play_suite
from spade.config import HeldoutSuiteConfig, load_config
from spade.errors import InferenceError
from spade.inference.openai import OpenAIBackend
from spade.sandbox.policy import load_policy
from spade.testing.openai_server import FakeOpenAIServer
from tests.benchmarks.scripted import ActionScript, gold_actions

pytestmark = pytest.mark.sandbox

SC = HeldoutSuiteConfig(name="reasoning_gym", size=4, seed=1, subsets=["gcd"])


def _play(faults: list[str], **overrides: object) -> SuiteResult:
    tasks = get_suite("reasoning_gym").tasks(SC.size, SC.seed, list(SC.subsets))
    with FakeOpenAIServer(script=ActionScript(gold_actions(tasks)), faults=faults) as server:
        cfg = load_config(
            overrides={
                **server.overrides(),
                "inference.max_retries": 0,
                "evaluation.max_tokens_per_turn": 4096,  # the stand-in: a token per character
                **overrides,
            }
        )
        backend = OpenAIBackend(cfg.inference, server.model)

        async def run() -> SuiteResult:
            try:
                return await play_suite(backend, SC, cfg, load_policy())
            finally:
                await backend.aclose()

        return asyncio.run(run())


@pytest.mark.attack
def test_failed_suite_plays_are_counted_and_do_not_lower_the_score():
    """A perfect agent behind a server that failed one of four requests still scores 1.0 (it
    scored 0.75 when the failure counted as a wrong answer)."""
    result = _play(["500"])
    assert [r["status"] for r in result.rows].count("inference_failed") == 1
    assert result.summary() == {
        "score": 1.0,
        "score_interval": [1.0, 1.0],
        "tasks": 4,
        "failed_plays": 1,
    }  # the failed play is in neither the mean nor its interval


def test_a_suite_past_the_failed_share_raises():
    with pytest.raises(InferenceError, match=r"2 of 4 plays of suite reasoning_gym"):
        _play(["500", "500"])
