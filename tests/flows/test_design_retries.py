"""The design task's Prefect retries fire on an outage: past ``designer.max_failed_share`` the
design stage raises InferenceError, Prefect runs it again and the retry, with the server back,
returns attempts none of which failed (a temporary Prefect API, the OpenAI stand-in)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from prefect import flow

from flows.design_tasks import design
from spade.config import load_config
from spade.pipeline.context import RoundContext
from spade.pipeline.documents import sample_documents
from spade.pipeline.replay import plan_round
from spade.pipeline.state import initial_memory
from spade.records import DesignAttempt
from spade.testing.openai_server import FakeOpenAIServer
from tests.designer.test_design_batch import CODE_BREAKER, fenced, write_corpus


class FlakyServer(FakeOpenAIServer):
    """Answers 500 to the first ``down`` chat requests, then a design to every request."""

    def __init__(self, down: int) -> None:
        super().__init__(script=lambda body: fenced(CODE_BREAKER))
        self.down, self.seen, self.guard = down, 0, threading.Lock()

    def _chat_with_fault(self, h: Any, body: dict[str, Any], fault: str) -> None:
        with self.guard:
            self.seen += 1
            failing = self.seen <= self.down
        super()._chat_with_fault(h, body, "500" if failing else fault)


def test_an_outage_of_the_design_stage_is_retried_by_prefect(prefect_api, tmp_path):
    with FlakyServer(down=2) as server:  # 2 of the first 3 requests: share 0.67 > 0.25
        cfg = load_config(
            overrides={
                **server.overrides(),
                "inference.max_retries": 0,
                "corpus.path": str(write_corpus(tmp_path / "corpus.jsonl")),
                "storage.root": str(tmp_path / "store"),
                "designer.envs_per_round": 3,
            }
        )
        ctx = RoundContext.open(cfg, "retry", 0)
        documents = sample_documents(ctx, plan_round(ctx))
        quick = design.with_options(retry_delay_seconds=0, retry_jitter_factor=None)
        assert quick.retries == design.retries >= 1

        @flow
        async def design_once() -> list[DesignAttempt]:
            memory = initial_memory(cfg)
            return await quick(ctx, 0, [0, 1, 2], documents, memory, 0)

        attempts = asyncio.run(design_once())
        assert server.seen == 6  # the failed try's 3 requests, then the retry's 3
    assert [a.slot for a in attempts] == [0, 1, 2]
    assert not any(a.failed for a in attempts) and all(a.code == CODE_BREAKER for a in attempts)
