"""``spade plan``: the presets' plan on an 8 x 80 GB node, refused on smaller ones with the
reason, JSON for scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spade.cli import app

PRESETS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("preset", ["games-8gpu", "tooluse-8gpu"])
def test_a_preset_fits_8_gpus_of_80_gb_and_says_where_each_part_goes(preset):
    result = CliRunner().invoke(
        app, ["plan", str(PRESETS / f"{preset}.yaml"), "--gpus", "8", "--gpu-mem", "80", "--json"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["serve"] == [0, 1, 2, 3] and plan["train"] == [4, 5, 6, 7]
    assert plan["problems"] == [] and plan["precision"] == "bf16" and plan["tokens"] == 32768
    rank = sum(b for _, b, _ in plan["training_rank"])
    assert 0.3 * 80 * 2**30 < rank < 0.95 * 80 * 2**30  # fits, and is no trivial sum
    assert plan["kv_tokens"] >= 32768  # at least one longest sequence per vLLM GPU


def test_smaller_gpus_or_fewer_of_them_are_refused_with_the_reason():
    preset = str(PRESETS / "games-8gpu.yaml")
    small = CliRunner().invoke(app, ["plan", preset, "--gpus", "8", "--gpu-mem", "24"])
    assert small.exit_code == 1
    assert "does not fit" in small.output and "its GPU has 24 GiB" in small.output
    few = CliRunner().invoke(app, ["plan", preset, "--gpus", "6", "--gpu-mem", "80"])
    assert few.exit_code != 0 and "has 6 visible GPU" in few.output
