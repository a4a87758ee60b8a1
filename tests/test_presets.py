"""Every preset under configs/ loads into the config tree and says what hardware it assumes."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade.config import load_config

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_preset_loads_and_names_its_hardware(path):
    cfg = load_config(path)
    assert cfg.name == path.stem
    assert "Hardware assumed" in path.read_text()


def test_gpu_presets_mirror_the_reference_launchers():
    for stem, mode, regen in (("games-8gpu", "games", 4), ("tooluse-8gpu", "tool_use", 8)):
        cfg = load_config(CONFIGS[0].parent / f"{stem}.yaml")
        assert cfg.designer.mode == mode and cfg.run.regen_interval == regen
        assert (cfg.designer.envs_per_round, cfg.designer.attempts_per_slot) == (24, 5)
        assert (cfg.evaluation.unhinted_plays, cfg.evaluation.hinted_plays) == (8, 16)
        assert cfg.evaluation.max_turns == 25 and cfg.designer.temperature == 0.6
        assert cfg.training.engine == "deepspeed" and cfg.training.deepspeed.zero_stage == 3
        assert cfg.inference.backend == "vllm"
