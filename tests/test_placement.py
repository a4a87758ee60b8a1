"""GPU placement: vLLM's GPUs and the training ranks' GPUs are chosen from the config, never
shared, and checked against the node's GPU count."""

from __future__ import annotations

import pytest

from spade.config import load_config
from spade.errors import ConfigError
from spade.placement import Placement, check_placement, placement


def _cfg(**overrides: object):
    base = {"model.device": "cuda", "inference.backend": "vllm"}
    return load_config(None, {**base, **overrides})


def test_training_defaults_to_the_gpus_vllm_leaves_free():
    cfg = _cfg(**{
        "inference.vllm.data_parallel_size": 4,
        "training.engine": "deepspeed",
        "training.ranks": 4,
    })  # fmt: skip
    assert placement(cfg) == Placement((0, 1, 2, 3), (4, 5, 6, 7))
    assert check_placement(cfg, 8).needed == 8


def test_explicit_devices_are_kept_and_an_overlap_is_refused():
    cfg = _cfg(**{"inference.vllm.devices": "2", "training.devices": "0"})
    assert placement(cfg) == Placement((2,), (0,))
    with pytest.raises(ConfigError, match=r"share GPU\(s\) \[1\]"):
        check_placement(_cfg(**{"inference.vllm.devices": "1", "training.devices": "1"}), 8)


def test_a_node_with_too_few_gpus_is_refused_naming_the_fields():
    cfg = _cfg(**{"inference.vllm.tensor_parallel_size": 2})  # GPUs 0-1 serve, GPU 2 trains
    with pytest.raises(ConfigError, match=r"up to index 2.*has 2 visible GPU"):
        check_placement(cfg, 2)


def test_the_cpu_and_other_backends_reserve_nothing():
    assert placement(load_config(None, {"model.device": "cpu"})) == Placement((), ())
    local = load_config(None, {"model.device": "cuda"})  # in-process model shares GPU 0
    assert placement(local) == Placement((), (0,))
    auto = load_config(None, {"model.device": "auto"})
    assert placement(auto, gpus=0) == Placement((), ())
    assert placement(auto, gpus=1) == Placement((), (0,))


def test_vllm_devices_must_match_its_parallelism():
    with pytest.raises(ConfigError, match=r"names 2 GPU.*= 4"):
        _cfg(**{"inference.vllm.devices": "0,1", "inference.vllm.data_parallel_size": 4})
