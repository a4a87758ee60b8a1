"""The evaluate stage stores plays as they finish: a retry plays only what is missing."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from spade.config import load_config
from spade.errors import InferenceError, StorageError
from spade.inference.factory import open_backend
from spade.pipeline.context import RoundContext
from spade.pipeline.evaluate import evaluate_env
from spade.pipeline.record import campaign_store, read_jsonl
from spade.records import EnvSpec, WeightsRef
from spade.testing.openai_server import FakeOpenAIServer
from spade.testing.scripted_designer import SKY

pytestmark = pytest.mark.sandbox

ENV = EnvSpec("sky", SKY, "mathematical_reasoning", "the colour of a clear sky")
TIMINGS = ("reset_s", "wall_s")
TURN_TIMINGS = ("generate_s", "step_s", "step_started_at")


def _config(server: FakeOpenAIServer, root: str):
    return load_config(
        overrides={
            **server.overrides(),
            "storage.root": root,
            "inference.max_retries": 0,
            "evaluation.unhinted_plays": 3,
            "evaluation.hinted_plays": 3,
            "evaluation.max_parallel_episodes": 1,  # request order = job order
        }
    )


def _run(cfg, campaign: str, weights: WeightsRef | None = None):
    async def go():
        async with open_backend(cfg) as backend:
            ctx = RoundContext.open(cfg, campaign, 0, weights)
            return await evaluate_env(ctx, ENV, backend)

    return asyncio.run(go())


def _stored(cfg, campaign: str, name: str):
    cs = campaign_store(cfg, campaign)
    return cs, cs.layout.stage_key(0, "evaluate", f"envs/sky/{name}")


def _untimed(row: dict) -> dict:
    """A stored trajectory without its wall-clock measurements (the rest is deterministic)."""
    turns = [{k: v for k, v in t.items() if k not in TURN_TIMINGS} for t in row["turns"]]
    return {k: v for k, v in row.items() if k not in TIMINGS} | {"turns": turns}


def test_a_retry_after_an_outage_plays_only_the_unfinished_plays(tmp_path):
    """Every play is one request (the script wins at once). The first attempt's last three
    requests fail (3 of 6 plays: over the threshold, the stage raises); the retry sends three
    requests, and its trajectories equal an uninterrupted run's."""
    win = lambda r: "\\boxed{azure}"  # noqa: E731
    with FakeOpenAIServer(script=win) as server:
        cfg = _config(server, str(tmp_path))
        _run(cfg, "whole")
        assert len(server.chat_requests) == 6
    with FakeOpenAIServer(script=win, faults=["ok"] * 3 + ["500"] * 3) as server:
        cfg = _config(server, str(tmp_path))
        with pytest.raises(InferenceError, match="3 of 6 plays"):
            _run(cfg, "c")
        cs, plays = _stored(cfg, "c", "plays")
        assert len(cs.store.list(plays)) == 3  # the finished plays; the failed ones are not
        cs, traj_key = _stored(cfg, "c", "trajectories.jsonl")
        assert not cs.store.exists(traj_key)  # the stage's outputs wait for every play
        first = len(server.chat_requests)
        retried = _run(cfg, "c")
        assert len(server.chat_requests) - first == 3  # finished plays are not replayed
    assert retried.failed_plays == 0 and retried.win_rate == 1.0
    assert retried.hinted_win_rate == 1.0 and retried.regret == 0.0
    got = read_jsonl(cs, traj_key)
    cs_whole, whole_key = _stored(cfg, "whole", "trajectories.jsonl")
    want = read_jsonl(cs_whole, whole_key)
    assert len(got) == 6 and [_untimed(r) for r in got] == [_untimed(r) for r in want]
    cs, summary = _stored(cfg, "c", "summary.json")
    assert cs.store.read_json(summary)["reused_plays"] == 3


def test_stored_plays_of_other_weights_are_not_reused(tmp_path):
    with FakeOpenAIServer(script=lambda r: "\\boxed{azure}") as server:
        cfg = _config(server, str(tmp_path))
        _run(cfg, "c", WeightsRef("r0001", "ckpt/r0001"))
        _run(cfg, "c", WeightsRef("r0001", "ckpt/r0001"))  # the same weights: all stored
        assert len(server.chat_requests) == 6
        _run(cfg, "c", WeightsRef("r0002", "ckpt/r0002"))
        assert len(server.chat_requests) == 12
        cs, summary = _stored(cfg, "c", "summary.json")
        assert cs.store.read_json(summary)["reused_plays"] == 0
        cs, plays = _stored(cfg, "c", "plays")
        assert len(cs.store.list(plays)) == 6  # the new plays replaced the old ones


def test_an_unreadable_stored_play_is_played_again(tmp_path):
    with FakeOpenAIServer(script=lambda r: "\\boxed{azure}") as server:
        cfg = _config(server, str(tmp_path))
        _run(cfg, "c")
        cs, plays = _stored(cfg, "c", "plays")
        torn = cs.store.list(plays)[0]
        cs.store.write_bytes(torn, b'{"env_id": "sky", "turns": [')
        _run(cfg, "c")
        assert len(server.chat_requests) == 7
        assert json.loads(cs.store.read_bytes(torn))["trajectory"]["status"] == "terminated"


def test_a_retry_after_a_failed_final_write_plays_nothing_again(tmp_path):
    """The store refuses trajectories.jsonl (a folder stands at its path: a real failed write,
    no fake), after every play ended; the retry reads all six plays back and sends nothing."""
    with FakeOpenAIServer(script=lambda r: "\\boxed{azure}") as server:
        cfg = _config(server, str(tmp_path))
        cs, traj_key = _stored(cfg, "c", "trajectories.jsonl")
        blocker = tmp_path / traj_key
        (blocker / "in-the-way").mkdir(parents=True)
        with pytest.raises((OSError, StorageError)):
            _run(cfg, "c")
        assert len(server.chat_requests) == 6
        shutil.rmtree(blocker)
        again = _run(cfg, "c")
        assert len(server.chat_requests) == 6  # nothing played twice
    assert again.win_rate == 1.0 and len(read_jsonl(cs, traj_key)) == 6
    cs, summary = _stored(cfg, "c", "summary.json")
    assert cs.store.read_json(summary)["reused_plays"] == 6
