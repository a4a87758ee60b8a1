"""What a GPU preset's campaign needs from Prefect and the node, found before round 0 and never
after a round of design and plays: the GPU concurrency limit (``run.gpu_concurrency_limit``)
exists on the server (a missing one is created with one slot; 0 slots are refused), and the
node the flow run landed on has the GPUs the config places work on (a GPU config on a
CPU-pool worker names the pool it belongs on). Against a real Prefect server without the limit:
the ``train`` task of a limited round trains under the slot it created."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from prefect import flow, get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.client.schemas.objects import GlobalConcurrencyLimit

from flows.campaign import campaign_flow
from flows.gpu_limit import ensure_gpu_limit
from flows.round import RoundTasks
from flows.stages import unwalked
from flows.storage import result_storage
from spade.config import CampaignConfig, load_config
from spade.errors import ConfigError
from spade.pipeline.context import RoundContext
from spade.pipeline.train import DesignerData, TrainOutcome
from spade.placement import visible_gpus
from spade.records import BASE, DesignAttempt
from spade.testing.scripted_designer import tiny_policy_overrides


def _name() -> str:
    """A limit no other test of this module's server has made."""
    return f"gpu-{uuid.uuid4().hex[:8]}"


async def _read(name: str) -> GlobalConcurrencyLimit | None:
    async with get_client() as client:
        limits = await client.read_global_concurrency_limits(limit=200)
    return next((limit for limit in limits if limit.name == name), None)


async def _create(name: str, slots: int, active: bool = True) -> None:
    async with get_client() as client:
        limit = GlobalConcurrencyLimitCreate(name=name, limit=slots, active=active)
        await client.create_global_concurrency_limit(limit)


def _designer_data() -> DesignerData:
    """Four design attempts of one skill, rewards alternating: a gradient to step on."""
    attempts = [
        DesignAttempt(
            slot=i,
            attempt=0,
            skill="logical_deduction",
            doc_id=f"d{i}",
            messages=[],
            prompt_token_ids=[10, 11, 12 + i],
            token_ids=[40 + i, 41, 43],
            logprobs=[-3.0, -2.5, -3.0],
        )
        for i in range(4)
    ]
    return DesignerData(attempts, [1.0, 0.0, 1.0, 0.0])


@flow(name="train-limited", persist_result=False)
async def train_flow(config: CampaignConfig, campaign_id: str) -> TrainOutcome:
    """The round's train task, as the round flow calls it."""
    ctx = RoundContext.open(config, campaign_id, 0)
    t = RoundTasks(await result_storage(config), config)
    return await t.train(ctx, unwalked(_designer_data()), BASE)


def test_a_limited_train_task_on_a_server_without_the_limit_creates_it_and_trains(
    prefect_api, tiny_policy, tmp_path
):
    name = _name()
    assert asyncio.run(_read(name)) is None  # the server never saw `spade deploy`
    cfg = load_config(
        overrides={
            "name": "limited",
            "storage.root": str(tmp_path / "store"),
            **tiny_policy_overrides(tiny_policy),
            "model.device": "cpu",
            "run.gpu_concurrency_limit": name,
        }
    )
    outcome = asyncio.run(train_flow(cfg, "limited-1"))
    assert not outcome.skipped and outcome.samples == 4
    assert outcome.weights.version != BASE.version  # an update was made and saved
    limit = asyncio.run(_read(name))
    assert limit is not None and limit.limit == 1 and limit.active
    assert limit.active_slots == 0  # the slot it held is free again


def test_ensure_creates_a_missing_limit_once_and_keeps_an_existing_ones_size(prefect_api):
    name = _name()
    first = asyncio.run(ensure_gpu_limit(name))
    again = asyncio.run(ensure_gpu_limit(name))
    assert (first.created, first.slots) == (True, 1)
    assert "created with 1 slot" in first.describe()
    assert (again.created, again.slots) == (False, 1)
    sized = _name()
    asyncio.run(_create(sized, 3))
    kept = asyncio.run(ensure_gpu_limit(sized))
    assert (kept.created, kept.slots, kept.describe()) == (False, 3, f"{sized}: 3 slot(s)")
    off = _name()
    asyncio.run(_create(off, 2, active=False))
    assert "inactive" in asyncio.run(ensure_gpu_limit(off)).describe()


def test_a_limit_without_slots_fails_the_campaign_before_round_0(prefect_api, tmp_path):
    name = _name()
    asyncio.run(_create(name, 0))
    root = tmp_path / "store"
    cfg = load_config(
        overrides={
            "storage.root": str(root),
            "model.device": "cpu",
            "run.gpu_concurrency_limit": name,
        }
    )
    state = asyncio.run(campaign_flow(config=cfg, campaign_id="c0", return_state=True))
    assert state.is_failed()
    with pytest.raises(ConfigError, match=f"{name}.*0 slots.*--gpu-slots"):
        state.result()
    assert not (root / "campaign").exists()  # nothing of the campaign was started


@pytest.mark.skipif(visible_gpus() >= 8, reason="this node has the GPUs an 8-GPU preset needs")
def test_a_gpu_preset_on_a_node_without_its_gpus_names_the_gpu_pool_before_round_0(
    prefect_api, tmp_path
):
    """What a GPU preset pasted into the CPU pool's `campaign` deployment meets on its worker."""
    root = tmp_path / "store"
    preset = Path(__file__).resolve().parents[2] / "configs" / "games-8gpu.yaml"
    cfg = load_config(preset, overrides={"storage.root": str(root)})
    state = asyncio.run(campaign_flow(config=cfg, campaign_id="g0", return_state=True))
    assert state.is_failed()
    with pytest.raises(
        ConfigError, match=r"GPUs up to index 7.*belongs on the spade-gpu work pool"
    ):
        state.result()
    assert not (root / "campaign").exists()
