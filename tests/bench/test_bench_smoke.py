"""Smoke tests of the sandbox, training and rollout benchmarks (``--quick``): each runs end to
end and writes the figures its table shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.runner import run_bench


@pytest.mark.sandbox
def test_sandbox_bench_quick_writes_three_sections(tmp_path: Path) -> None:
    data = run_bench("sandbox.py", "--quick", out=tmp_path / "sandbox.json", timeout=180)
    assert data["machine"]["nproc"] > 0 and data["machine"]["timestamp"]

    start = data["start_latency"]
    for key in ("jailed_start_close", "plain_host_python", "plain_jail_python"):
        assert start[key]["median"] > 0 and start[key]["p90"] > 0
    assert start["ratio_vs_host_python"] > 0 and start["ratio_vs_jail_python"] > 0

    step = data["step_overhead"]
    for key in ("in_process", "plain_pipe_echo", "jailed"):
        assert step[key]["median"] > 0 and step[key]["n"] > 0

    runs = data["verify_throughput"]["runs"]
    assert [r["workers"] for r in runs] == [1, 2, 4]
    for run in runs:
        assert run["verifications"] > 0 and run["per_second"] > 0 and run["speedup"] > 0


@pytest.mark.slow  # ~40 s: .ci/run runs it after the default suite
def test_train_bench_quick_compares_the_engines_on_one_batch(tmp_path: Path) -> None:
    data = run_bench("train.py", "--quick", out=tmp_path / "train.json", timeout=300)
    torch_run, ds_run = data["results"]
    assert torch_run["engine"] == "torch" and ds_run["engine"].startswith("deepspeed")
    assert torch_run["tokens_per_step"] == ds_run["tokens_per_step"] > 0  # the same batch
    assert all(r["tokens_per_s"] > 0 and r["step_seconds_median"] > 0 for r in data["results"])
    assert data["deepspeed_over_torch"] == ds_run["tokens_per_s"] / torch_run["tokens_per_s"]


@pytest.mark.slow  # ~50 s
@pytest.mark.sandbox
def test_rollouts_bench_quick_compares_transformers_and_llamacpp(
    tmp_path: Path, smol_env: Path
) -> None:
    data = run_bench("rollouts.py", "--quick", out=tmp_path / "rollouts.json", timeout=600)
    settings, results = data["settings"], data["results"]
    for name in ("transformers", "llama.cpp"):
        r = results[name]
        assert r["designs"] == settings["designs"] and r["design_failures"] == 0
        assert r["design_tokens"] > 0 and r["episodes"] == settings["episodes"]
        assert r["episode_tokens"] > 0 and sum(r["statuses"].values()) == r["episodes"]
    ratio = data["llamacpp_over_transformers"]
    for key in ("designs_per_min", "episodes_per_min", "episode_tokens_per_s"):
        assert ratio[key] == results["llama.cpp"][key] / results["transformers"][key]
    behaviour = data["behaviour_ratio"]  # llama.cpp's tokens rescored by the training model
    assert behaviour["tokens"] == results["llama.cpp"]["design_tokens"]
    assert 0 < behaviour["min"] <= behaviour["mean"] <= behaviour["max"]
    assert "not measured" in data["vllm_cpu"]


@pytest.mark.slow  # ~35 s
@pytest.mark.sandbox
def test_designs_bench_quick_counts_every_attempt_per_variant(
    tmp_path: Path, smol_env: Path
) -> None:
    data = run_bench("designs.py", "--quick", out=tmp_path / "designs.json", timeout=600)
    rows = data["rows"]
    assert [r["variant"] for r in rows] == ["write-bare", "edit-repair"]
    for r in rows:
        assert r["attempts"] == data["settings"]["attempts"] == len(r["designs"])
        assert sum(r["final_kinds"].values()) == r["attempts"]
        assert 0 <= r["novel"] <= r["accepted"] <= r["attempts"] and r["minutes"] > 0
        assert r["after_repair"] <= r["accepted"]
        assert r["kept"] <= r["novel"] and sum(r["caught"].values()) <= r["accepted"]
        assert r["kept"] == sum(d["kept"] for d in r["designs"])
        assert all(d["diff"] for d in r["designs"] if d["kept"])
    assert {d["strategy"] for d in rows[0]["designs"]} == {"write"}


@pytest.mark.slow  # 2-5 min: four configurations, each in its own process (bf16 is slow on
@pytest.mark.timeout(900)  # cores without native bf16: the bench's own limit)
def test_memory_bench_quick_sets_each_prediction_beside_a_measured_peak(tmp_path: Path) -> None:
    data = run_bench("memory.py", "--quick", out=tmp_path / "memory.json", timeout=900)
    rows = data["rows"]
    assert {(r["checkpointing"], r["precision"]) for r in rows} == {
        (c, p) for c in (False, True) for p in ("autocast", "bf16")
    }
    for r in rows:  # a real peak (more than the model's own bf16 weights) and a real prediction
        assert r["measured"] > 2 * r["params"] and r["predicted"] > 2 * r["params"]
        assert r["ratio"] == r["predicted"] / r["measured"]
    assert data["configurations"] == 4 and len(data["bf16_over_autocast"]) == 2


@pytest.mark.slow  # ~30 s: the tiny policy's chain of six updates under four variants
def test_role_steps_bench_quick_measures_both_roles_on_one_chain_per_variant(
    tmp_path: Path,
) -> None:
    data = run_bench("role_steps.py", "--quick", out=tmp_path / "role_steps.json", timeout=600)
    rows, scale = data["rows"], data["settings"]["scale"]
    by_variant = {v: [r for r in rows if r["variant"] == v] for v in data["summary"]}
    assert list(by_variant) == ["current", "scaled", "zscore", "separate"]
    for chain in by_variant.values():  # agent then designer each round, one chain of steps
        assert [r["role"] for r in chain] == ["agent", "designer"] * 3
        assert all(r["grad_norm"] > 0 and r["step_rms_over_lr"] > 0 for r in chain)
    current, scaled = by_variant["current"], by_variant["scaled"]
    assert [r["adam_step"] for r in current] == [1, 2, 3, 4, 5, 6]  # one AdamW carried
    for a, b in zip(current, scaled, strict=True):  # the same batches; only the designer scaled
        factor = scale if a["role"] == "designer" else 1.0
        assert b["advantage_abs_mean"] == pytest.approx(a["advantage_abs_mean"] * factor)
    assert scaled[0] == current[0] | {"variant": "scaled", "seconds": scaled[0]["seconds"]}
    # separate: each role continues its own AdamW (a fresh one at its first update)
    assert [r["adam_step"] for r in by_variant["separate"]] == [1, 1, 2, 2, 3, 3]
    assert [r["optimizer_step"] for r in by_variant["separate"]] == [1, 2, 3, 4, 5, 6]
    assert data["comparison"]["current"]["agent_step_over_current"] == 1.0
    assert data["env_reward_scales"]["games-8gpu (8 plays, interval 4)"] == 32
    assert data["env_reward_scales"]["tooluse-8gpu (8 plays, interval 8)"] == 50
