"""Scripted policies for held-out suites, served by the OpenAI stand-in (a fake only at the
HTTP boundary): the rollout, sandbox and scoring code under test are the real ones.

Every suite's first observation names its task on a line ``[task <env_id>]``; the script finds
that line in the conversation and answers with the task's next scripted action (the number of
assistant turns so far picks which), repeating the last one when the script runs out.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spade.benchmarks.base import HeldoutTask
from spade.benchmarks.runner import SuiteResult, play_suite
from spade.config import HeldoutSuiteConfig, load_config
from spade.inference.openai import OpenAIBackend
from spade.sandbox.policy import load_policy
from spade.testing.openai_server import FakeOpenAIServer

TASK_LINE = re.compile(r"^\[task ([^\]\n]+)\]", re.MULTILINE)


class ActionScript:
    """``(request) -> text`` answering each task with its scripted actions, turn by turn."""

    def __init__(self, actions: Mapping[str, Sequence[str]]) -> None:
        self.actions = {k: list(v) for k, v in actions.items()}

    def __call__(self, request: dict[str, Any]) -> str:
        messages = request["messages"]
        text = "\n".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
        match = TASK_LINE.search(text)
        assert match, "no [task ...] line in the conversation"
        script = self.actions[match.group(1)]
        turn = sum(1 for m in messages if m["role"] == "assistant")
        return script[min(turn, len(script) - 1)]


def gold_actions(tasks: Sequence[HeldoutTask]) -> dict[str, Sequence[str]]:
    """The perfect policy: every task's gold actions."""
    return {t.env_id: t.gold for t in tasks}


def play_scripted(
    sc: HeldoutSuiteConfig,
    actions: Mapping[str, Sequence[str]] | Callable[[dict[str, Any]], str],
    **overrides: object,
) -> SuiteResult:
    """Play ``sc``'s subset against the stand-in answering with ``actions``."""
    script = actions if callable(actions) else ActionScript(actions)
    with FakeOpenAIServer(script=script) as server:
        cfg = load_config(
            overrides={
                **server.overrides(),
                "inference.max_retries": 0,
                **overrides,
            }
        )
        backend = OpenAIBackend(cfg.inference, server.model)

        async def run() -> SuiteResult:
            try:
                return await play_suite(backend, sc, cfg, load_policy(cfg.sandbox.policy_path))
            finally:
                await backend.aclose()

        return asyncio.run(run())


def play_shipped_model(sc: HeldoutSuiteConfig, **overrides: object) -> SuiteResult:
    """Play ``sc``'s subset with the configured model (the default: the shipped SmolLM2 in
    process) through the pooled backend, as the heldout stage does; the pool is emptied after."""
    from spade.inference.pool import close_shared_backends, shared_backend

    cfg = load_config(overrides=dict(overrides))

    async def run() -> SuiteResult:
        try:
            async with shared_backend(cfg) as backend:
                return await play_suite(backend, sc, cfg, load_policy(cfg.sandbox.policy_path))
        finally:
            await close_shared_backends()

    return asyncio.run(run())
