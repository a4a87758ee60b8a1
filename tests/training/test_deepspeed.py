"""GRPOTrainer on DeepSpeed ZeRO, on CPU with gloo: learning signal, resume, and 2 ranks = 1.

DeepSpeed's CPU communicator op is compiled once (~1 min here) under ``TORCH_EXTENSIONS_DIR``
(default ``~/.cache/spade/torch_extensions/<environment>``), by ``scripts/bootstrap.sh`` before the tests run
(else by the first test); loading it takes well under a second. The in-process tests share one
single-rank process group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from spade.config import TrainingConfig
from spade.errors import ConfigError
from spade.processes import free_port
from spade.training.engines import deepspeed_config
from spade.training.samples import collate, micro_batches
from spade.training.trainer import GRPOTrainer
from tests.training import ds_worker
from tests.training.tiny_task import (
    GOOD,
    GRAD_REL,
    LORA,
    PAD,
    PROMPT,
    adam_first_step_slack,
    learn,
    on_policy_step,
    sequence_logprob,
    skips_the_flat_update,
    task_samples,
    tiny_llama,
    varied_samples,
)

pytest.importorskip("deepspeed")

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "training" / "ds_worker.py"
BUDGET = 60  # with it the two ranks' shards need 2 and 1 micro-batches: the padding path runs


def _ds(stage: int = 2, *, deepspeed: dict | None = None, **kw) -> TrainingConfig:
    ds = {"zero_stage": stage, **(deepspeed or {})}
    return TrainingConfig(engine="deepspeed", deepspeed=ds, **kw)


def test_config_choices_on_cpu():
    cfg = deepspeed_config(_ds(grad_clip=0.5, weight_decay=0.1), 3e-4, on_cpu=True)
    assert cfg["zero_optimization"] == {"stage": 2}
    assert cfg["optimizer"]["params"]["torch_adam"] is True  # nothing to compile on CPU
    assert cfg["optimizer"]["params"]["lr"] == 3e-4 and cfg["gradient_clipping"] == 0.5
    assert cfg["managed_gradient_accumulation"] is False
    offload = _ds(3, deepspeed={"offload_optimizer": True, "offload_params": True})
    cfg = deepspeed_config(offload, 1e-6, on_cpu=True)
    assert "torch_adam" not in cfg["optimizer"]["params"]  # DeepSpeedCPUAdam
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert cfg["zero_optimization"]["offload_param"]["device"] == "cpu"
    gpu = deepspeed_config(_ds(), 1e-6, on_cpu=False)
    assert gpu["optimizer"]["params"]["torch_adam"] is True  # no op compiled at the first step
    assert gpu["torch_autocast"] == {"enabled": False}
    bf16 = deepspeed_config(_ds(3), 1e-6, on_cpu=False, autocast_dtype=torch.bfloat16)
    assert bf16["torch_autocast"]["enabled"] and bf16["torch_autocast"]["dtype"] == "bfloat16"
    with pytest.raises(ConfigError, match="zero_stage 3"):
        deepspeed_config(_ds(2, deepspeed={"offload_params": True}), 1e-6, on_cpu=True)


def test_each_python_environment_builds_its_ops_in_a_folder_of_its_own(monkeypatch, tmp_path):
    """Two checkouts' environments on one machine (two ``make test`` side by side) each keep
    their own build of an op: in one shared folder each rebuilt the other's, while the other's
    ranks waited on the build lock past their tests' timeout."""
    from spade.training import extensions as engines

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path))
    folders = {}
    for checkout in ("a", "b", "a"):
        monkeypatch.setattr(sys, "prefix", str(tmp_path / checkout / ".venv"))
        folders.setdefault(checkout, set()).add(engines.extensions_dir())
    assert all(len(found) == 1 for found in folders.values())  # stable for an environment
    (a,), (b,) = folders["a"], folders["b"]
    assert a != b and a.parent == b.parent == tmp_path / "torch_extensions"
    assert engines.ensure_extensions_dir() == a and a.is_dir()  # the last prefix set: a's
    assert os.environ["TORCH_EXTENSIONS_DIR"] == str(a)  # what launched ranks inherit
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "mine"))
    assert engines.extensions_dir() == tmp_path / "mine"  # a folder set by the user wins


def test_zero2_learns_the_rewarded_completion():
    trainer = GRPOTrainer(tiny_llama(), PAD, _ds(2, lr=1e-2))
    assert trainer.engine.name == "deepspeed" and trainer.engine.world_size == 1
    good, bad = learn(trainer, steps=6)
    assert good > 0.5 and bad < -0.5


def test_zero3_lora_learns_with_a_kl_to_the_base():
    trainer = GRPOTrainer(tiny_llama(), PAD, _ds(3, lr=2e-2, lora=LORA, kl_coef=0.005))
    good, bad = learn(trainer, steps=6)
    assert good > 0.5 and bad < -0.5


@pytest.mark.parametrize("stage", [2, 3])
def test_bf16_weights_learn_at_a_small_learning_rate(stage):
    """A bf16 model (model.dtype 'auto' on GPU) with deepspeed.bf16 off: fp32 master weights
    under bf16 autocast, as on the torch engine; a 1e-5 step moves every weight and the export
    is the fp32 masters (DeepSpeed's own bf16 mode would export bf16-rounded weights)."""
    start = {k: v.float() for k, v in tiny_llama().to(torch.bfloat16).state_dict().items()}
    trainer = GRPOTrainer(tiny_llama().to(torch.bfloat16), PAD, _ds(stage, lr=1e-5))
    assert trainer.engine.compute_dtype == torch.bfloat16
    for _ in range(3):
        trainer.step(task_samples(trainer.model))
    weights = trainer.export_weights()
    assert weights["lm_head.weight"].dtype == torch.float32
    dense = [k for k in weights if k.endswith("proj.weight") or k == "lm_head.weight"]
    moved = sum(int((weights[k] != start[k]).sum()) for k in dense)
    assert moved > 0.9 * sum(start[k].numel() for k in dense)
    base = tiny_llama().to(torch.bfloat16).float()
    with trainer.engine.full_parameters():
        rise = sequence_logprob(trainer.model, PROMPT, GOOD) - sequence_logprob(base, PROMPT, GOOD)
    assert rise > 0.05  # ~0.09 nats, as on the torch engine


@pytest.mark.parametrize("stage", [2, 3])
def test_bf16_compute_holds_inside_deepspeeds_forward(monkeypatch, stage):
    """The forward computes in bf16 over fp32 masters when DeepSpeed runs it, on the device it
    runs on. DeepSpeed's forward asks ``torch.is_autocast_enabled()`` (no device: CUDA's state)
    and, without a ``torch_autocast`` config section, turns an outer autocast off: on a GPU
    the trainer's bf16 autocast was silently undone and the step ran in fp32, which a CPU run
    cannot see (CUDA's flag is off here). The patch makes that question answer for this run's
    device (cpu), as it does for cuda on a GPU; each linear layer's output dtype is recorded."""
    trainer = GRPOTrainer(tiny_llama().to(torch.bfloat16), PAD, _ds(stage, lr=1e-5))
    samples = task_samples(trainer.model)
    seen: list[torch.dtype] = []
    proj = trainer.model.model.layers[0].mlp.down_proj
    proj.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    asks = torch.is_autocast_enabled
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda *d: asks(*d) if d else asks("cpu"))
    trainer.step(samples)  # the trainer's path: its own autocast around DeepSpeed's forward
    batch = collate(samples, PAD)
    with torch.no_grad():  # DeepSpeed's forward alone, no autocast around it
        trainer.engine.module(
            **{k: batch[k] for k in ("input_ids", "attention_mask", "loss_mask", "target_ids")}
        )
    assert len(seen) == 2 and set(seen) == {torch.bfloat16}
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}  # the masters


def test_several_updates_per_batch_keep_the_ranks_in_step():
    trainer = GRPOTrainer(tiny_llama(), PAD, _ds(2, lr=1e-2, updates_per_batch=3, eps_low=0.01))
    m = trainer.step(task_samples(trainer.model))
    assert m.updates == 3 and trainer.global_step == 3 and m.clip_fraction > 0.0
    assert trainer.last_updates[0].ratio_mean == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_resume_continues_bit_identically(tmp_path, stage):
    config = _ds(stage, lr=1e-2, micro_batch_tokens=40)
    samples = varied_samples()
    trainer = GRPOTrainer(tiny_llama(), PAD, config)
    trainer.step(samples)
    trainer.save(str(tmp_path))
    trainer.step(samples)
    trainer.step(samples)
    expected = trainer.export_weights()
    fresh = GRPOTrainer(tiny_llama(seed=7), PAD, config)
    info = fresh.resume(str(tmp_path))
    assert info is not None and info.step == 1
    fresh.step(samples)
    fresh.step(samples)
    got = fresh.export_weights()
    assert all(torch.equal(got[k], expected[k]) for k in expected)


@pytest.mark.parametrize("stage", [2, 3])
def test_an_update_without_a_gradient_takes_no_optimizer_step(stage):
    """As on the torch engine (tests/training/test_trainer.py): DeepSpeed's engine.step is not
    called, so its partitioned fp32 masters and Adam moments stay as they were."""
    skips_the_flat_update(GRPOTrainer(tiny_llama(), PAD, _ds(stage, lr=1e-2, weight_decay=0.1)))


def _two_ranks(out: Path, *worker_args: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """ds_worker.py under torchrun on 2 ranks: rank 0's metrics and the updated weights."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}  # fmt: skip
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           str(WORKER), str(out), str(BUDGET), *worker_args]  # fmt: skip
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    metrics = json.loads((out / "metrics.json").read_text())
    return metrics, torch.load(out / "weights.pt", weights_only=True)


SHIFT = ("shift_kl", "shift_up", "shift_down")


@pytest.mark.slow  # in `make test`: 2 ranks of a flow's training stage (3 and 2 of 5 samples)
# give the one-rank update, to the same bounds (tests/flows/test_train_ranks.py)
def test_two_processes_give_the_one_process_step(tmp_path):
    """torchrun, 2 ranks x half the batch == 1 rank x the whole batch == the step written out
    by hand (loss, gradient norm, new weights), each to what float32 guarantees: the ranks sum
    the gradient in another order, and AdamW's first step, lr * g / (|g| + eps), turns a
    rounding-sized difference in a near-zero gradient into up to 2 lr (adam_first_step_slack)."""
    whole = varied_samples(n=ds_worker.GLOBAL_BATCH)
    per_rank = [len(micro_batches(ds_worker.shard(whole, r, 2), BUDGET)) for r in range(2)]
    assert per_rank[0] != per_rank[1]  # uneven micro-batch counts: zero-weight padding runs

    two, two_weights = _two_ranks(tmp_path / "two")

    trainer, one = ds_worker.one_step(BUDGET)  # in this process: one rank, the whole batch
    one_weights = trainer.export_weights()

    assert two["world_size"] == 2 and one["samples"] == two["samples"] == 8
    assert one["tokens"] == two["tokens"] and one["trained_tokens"] == two["trained_tokens"]
    # how far the step moved the policy, summed over the ranks' shards (padding left out)
    print("\n1 vs 2 processes, moved:", *(f"{k} {one[k]:.8f}/{two[k]:.8f}" for k in SHIFT))
    for key in SHIFT:
        assert two[key] == pytest.approx(one[key], rel=1e-3), key  # measured: 2e-7
    print(f"\n1 vs 2 processes: loss {one['loss']:.10f} vs {two['loss']:.10f}, "
          f"grad norm {one['grad_norm']:.8f} vs {two['grad_norm']:.8f}")  # fmt: skip
    loss, grads = on_policy_step(whole)  # the step both must take, written out by hand
    scale = sum(abs(s.advantage or 0.0) for s in whole) / len(whole)  # the loss's terms' size
    for run in (one, two):
        assert run["loss"] == pytest.approx(loss, abs=GRAD_REL * scale)
    norm = float(torch.nn.utils.get_total_norm(list(grads.values())))
    assert one["grad_norm"] == pytest.approx(norm, rel=GRAD_REL)
    assert two["grad_norm"] == pytest.approx(norm, rel=GRAD_REL)

    # the new weights: one AdamW step on the clipped gradient, to what its arithmetic allows
    clip = min(1.0, TrainingConfig().grad_clip / norm)
    assert clip < 1.0  # the clip is at work in both runs
    replay = tiny_llama()
    for name, p in replay.named_parameters():
        p.grad = grads[name] * clip
    torch.optim.AdamW(replay.parameters(), lr=ds_worker.LR, weight_decay=0.0).step()
    expected = dict(replay.named_parameters())
    tight = 0
    for name, p in expected.items():
        rounding = 1e-5 * ds_worker.LR + 1e-6 * p.detach().abs()  # a few ulps of the weight
        slack = adam_first_step_slack(p.grad, ds_worker.LR) + rounding
        tight += int((slack < 1e-3 * ds_worker.LR).sum())
        for got in (one_weights[name], two_weights[name]):
            assert bool(((got - p.detach()).abs() <= slack).all()), name
    print(f"1 vs 2 processes: {tight} of {sum(p.numel() for p in expected.values())} weights "
          f"held to 1e-3 lr (the others' gradients are near the rounding floor)")  # fmt: skip
    assert tight > 0.5 * sum(p.numel() for p in expected.values())


def test_two_processes_step_together_when_one_shard_has_no_gradient(tmp_path):
    """Rank 1's shard is flat (every advantage 0), rank 0's is not: whether an update has a
    gradient is decided over the whole batch, so both ranks run their backward (ZeRO-2 reduces
    inside it: a rank that skipped would leave the other waiting) and take the step, which
    matches one process's step on the whole batch."""
    whole = ds_worker.global_batch(flat=True)
    shards = [ds_worker.shard(whole, r, 2) for r in range(2)]
    assert any(s.advantage for s in shards[0]) and not any(s.advantage for s in shards[1])
    two, two_weights = _two_ranks(tmp_path / "two", "flat")
    trainer, one = ds_worker.one_step(BUDGET, flat=True)
    one_weights = trainer.export_weights()
    assert two["optimizer_steps"] == one["optimizer_steps"] == 1
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=GRAD_REL)
    start = tiny_llama().state_dict()
    assert any(not torch.equal(one_weights[k], start[k]) for k in start)  # the step moved them
    for name, got in two_weights.items():  # AdamW's first step moves a weight by at most ~lr
        assert bool(((got - one_weights[name]).abs() <= 2 * ds_worker.LR).all()), name


@pytest.mark.slow  # DeepSpeed compiles cpu_adam on first use (~135 s on 2 cores, then cached)
@pytest.mark.parametrize(
    "options",
    [{"offload_optimizer": True}, {"offload_optimizer": True, "offload_params": True}],
    ids=["zero2-offload-optimizer", "zero3-offload-all"],
)
def test_cpu_offload_learns_the_rewarded_completion(options):
    stage = 3 if options.get("offload_params") else 2
    trainer = GRPOTrainer(tiny_llama(), PAD, _ds(stage, lr=1e-2, deepspeed=options))
    assert type(trainer.engine.engine.basic_optimizer).__name__ == "DeepSpeedCPUAdam"
    good, bad = learn(trainer, steps=6)
    assert good > 0.5 and bad < -0.5


@pytest.mark.slow
def test_deepspeeds_own_bf16_mode_trains():
    """deepspeed.bf16 on: the module in bf16, fp32 masters inside DeepSpeed's optimizer."""
    trainer = GRPOTrainer(tiny_llama(), PAD, _ds(2, lr=1e-2, deepspeed={"bf16": True}))
    good, bad = learn(trainer, steps=6)
    assert good > 0.5 and bad < -0.5
    assert trainer.export_weights()["lm_head.weight"].dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("given", "readable"),
    [
        ("9.0a", "9.0"),  # the H200 image's value: DeepSpeed 0.19.8 raised on it
        ("8.0;9.0a+PTX", "8.0;9.0+PTX"),
        ("7.5 8.6", "7.5 8.6"),
        ("10.0a;12.0f", "10.0;12.0"),
    ],
)
def test_arch_suffixes_are_dropped_for_deepspeeds_op_builder(given, readable):
    from spade.training.engines import deepspeed_arch_list

    assert deepspeed_arch_list(given) == readable
