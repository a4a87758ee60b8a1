"""The heldout stage plays benchmark suites and the dashboard reads them back, on a local
store and on S3 (moto), with a scripted perfect agent behind the OpenAI stand-in."""

from __future__ import annotations

import asyncio
import json

import pytest

from spade.benchmarks.base import get_suite
from spade.config import load_config
from spade.dashboard.data import CampaignData
from spade.inference.pool import close_shared_backends
from spade.pipeline.campaign import ensure_campaign
from spade.pipeline.context import RoundContext
from spade.pipeline.heldout import heldout
from spade.pipeline.record import campaign_store
from spade.pipeline.summary import summarize_round
from spade.records import BASE
from spade.testing.openai_server import FakeOpenAIServer
from tests.benchmarks.scripted import ActionScript, gold_actions

pytestmark = pytest.mark.sandbox

SUITES = [
    {"name": "humaneval", "size": 2, "seed": 1},
    {"name": "reasoning_gym", "size": 2, "seed": 1, "subsets": ["gcd"]},
]


def _play_round(root: str, options: dict[str, object]) -> tuple[dict[str, object], object]:
    tasks = get_suite("humaneval").tasks(2, 1, []) + get_suite("reasoning_gym").tasks(2, 1, ["gcd"])
    with FakeOpenAIServer(script=ActionScript(gold_actions(tasks))) as server:
        cfg = load_config(
            overrides={
                **server.overrides(),
                "evaluation.max_tokens_per_turn": 4096,  # the stand-in: a token per character
                "storage.root": root,
                "storage.storage_options": options,
                "run.heldout_suites": SUITES,
            }
        )
        return _heldout_round(cfg, "suites"), cfg


def _heldout_round(cfg, campaign: str, weights=BASE) -> dict[str, object]:
    """The heldout stage of round 0 of a new campaign, on ``weights`` (the base weights)."""
    ctx = RoundContext.open(cfg, campaign, 0)
    ensure_campaign(ctx.store, cfg)

    async def run() -> dict[str, object]:
        try:
            return await heldout(ctx, weights)
        finally:
            await close_shared_backends()

    return asyncio.run(run())


def _check(root: str, options: dict[str, object]) -> None:
    overall, cfg = _play_round(root, options)
    want = {"score": 1.0, "score_interval": [1.0, 1.0], "tasks": 2, "failed_plays": 0}
    assert overall["suites"] == {"humaneval": want, "reasoning_gym": want}
    cs = campaign_store(cfg, "suites")  # type: ignore[arg-type]
    prefix = f"{cs.layout.campaign_prefix}/round-0000/heldout"
    stored = json.loads(cs.store.read_bytes(f"{prefix}/summary.json"))
    assert stored["suites"] == overall["suites"] and stored["win_rate"] is None
    # the round's summary row (status, metrics sinks) carries them too
    assert summarize_round(campaign_store(cfg, "suites"), 0)["heldout_suites"] == overall["suites"]  # type: ignore[arg-type]
    rows = [json.loads(x) for x in cs.store.read_bytes(f"{prefix}/suites.jsonl").splitlines()]
    assert sorted((r["suite"], r["score"]) for r in rows) == [
        ("humaneval", 1.0), ("humaneval", 1.0), ("reasoning_gym", 1.0), ("reasoning_gym", 1.0),
    ]  # fmt: skip
    data = CampaignData(root, "suites", options)
    (summary,) = data.overview().rounds
    assert summary.row()["heldout_humaneval"] == 1.0
    assert len(data.heldout_items(0)) == 4
    transcripts = data.heldout_transcripts(0, "reasoning_gym")
    assert len(transcripts) == 2 and all(
        m[1]["content"].startswith("[task reasoning_gym/gcd-1-") for m in transcripts.values()
    )


def test_suites_on_a_local_store(tmp_path):
    _check(str(tmp_path / "runs"), {})


def test_suites_on_s3(s3_bucket):
    _check(f"s3://{s3_bucket.name}/runs", s3_bucket.storage_options)


@pytest.mark.parametrize(("heldout_plays", "played"), [(None, 3), (2, 2)])
def test_heldout_plays_each_environment_as_often_as_configured(tmp_path, heldout_plays, played):
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "spade/envs/examples/code_breaker.py"
    with FakeOpenAIServer(script=lambda r: "\\boxed{0123}") as server:
        cfg = load_config(
            overrides={
                **server.overrides(),
                "evaluation.unhinted_plays": 3,
                "evaluation.max_turns": 1,
                "storage.root": str(tmp_path),
                "run.heldout_envs": [str(example)],
                "run.heldout_plays": heldout_plays,
            }
        )
        overall = _heldout_round(cfg, "plays")
        chats = [r for r in server.requests if r.path.endswith("/chat/completions")]
    assert overall["environments"] == 1 and len(chats) == played  # one turn per play
    cs = campaign_store(cfg, "plays")
    prefix = f"{cs.layout.campaign_prefix}/round-0000/heldout"
    (row,) = [json.loads(x) for x in cs.store.read_bytes(f"{prefix}/results.jsonl").splitlines()]
    # the mean return beside the win rate (partial credit: what moves first for a small model)
    assert overall["mean_return"] == row["mean_return"] and 0.0 <= row["mean_return"] <= 1.0
    assert (
        summarize_round(campaign_store(cfg, "plays"), 0)["heldout_mean_return"]
        == row["mean_return"]
    )


def test_round_zero_also_plays_the_base_weights_with_intervals(tmp_path):
    """Round 0's held-out stage plays the set with the base weights as well, under base/:
    the numbers every later round compares with. Here the base model answers right and the
    adapter wrong, so the two summaries differ the way the plays did."""
    from pathlib import Path

    from spade.records import WeightsRef

    example = Path(__file__).resolve().parents[2] / "spade/envs/examples/code_breaker.py"
    trained = WeightsRef("r0000-agent", str(tmp_path / "adapter"), "lora")

    def script(body: dict[str, object]) -> str:  # the served name says which weights answer
        return "\\boxed{9999}" if body.get("model") == trained.version else "\\boxed{0123}"

    with FakeOpenAIServer(script=script) as server:
        server.adapters[trained.version] = str(trained.checkpoint)  # as publish would load it
        cfg = load_config(
            overrides={
                **server.overrides(),
                "evaluation.unhinted_plays": 4,
                "evaluation.max_turns": 1,
                "storage.root": str(tmp_path / "runs"),
                "run.heldout_envs": [str(example)],
            }
        )
        overall = _heldout_round(cfg, "base", trained)
        models = [r.body.get("model") for r in server.requests if r.path.endswith("/completions")]
    assert models.count(trained.version) == 4 and len(models) == 8  # 4 plays each
    base = overall["base"]
    assert base["weights"] == "base" and overall["weights"] == trained.version
    assert base["plays"] == overall["plays"] == 4
    for summary in (base, overall):
        lo, hi = summary["mean_return_interval"]
        assert lo <= summary["mean_return"] <= hi
        lo, hi = summary["win_rate_interval"]
        assert 0.0 <= lo <= summary["win_rate"] <= hi <= 1.0
    cs = campaign_store(cfg, "base")
    prefix = f"{cs.layout.campaign_prefix}/round-0000/heldout"
    assert json.loads(cs.store.read_bytes(f"{prefix}/summary.json")) == overall
    (row,) = [
        json.loads(x) for x in cs.store.read_bytes(f"{prefix}/base/results.jsonl").splitlines()
    ]
    assert row["weights"] == "base" and row["mean_return"] == base["mean_return"]
    row = summarize_round(cs, 0)
    assert row["heldout_base"]["mean_return"] == base["mean_return"]
    assert row["heldout_mean_return_interval"] == overall["mean_return_interval"]


def test_later_rounds_and_a_switched_off_base_pass_play_once(tmp_path):
    from spade.pipeline.heldout import plays_base

    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    assert plays_base(RoundContext.open(cfg, "c", 0))
    assert not plays_base(RoundContext.open(cfg, "c", 1))
    off = load_config(overrides={"storage.root": str(tmp_path), "run.heldout_base": False})
    assert not plays_base(RoundContext.open(off, "c", 0))
