"""GPU placement: vLLM's GPUs and the training ranks' GPUs are chosen from the config, never
shared, and checked against the node's GPU count; a child process's CUDA_VISIBLE_DEVICES and
the GPU of an update in the worker's own process follow from it."""

from __future__ import annotations

import pytest

from spade.config import load_config
from spade.errors import ConfigError
from spade.placement import Placement, check_placement, cuda_visible_devices, placement
from spade.training.run import in_process_gpu, single_rank_variables


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


def test_child_gpus_are_numbered_through_the_workers_own_visible_devices():
    """No CUDA_VISIBLE_DEVICES of its own: the indices themselves; one: the entries they
    number (UUIDs as written); past its list: refused naming whose GPUs and the fields."""
    names = {"what": "the training ranks' GPUs", "fields": "training.devices"}
    assert cuda_visible_devices((4, 5), environ={}, **names) == "4,5"
    assert (
        cuda_visible_devices((1, 2), environ={"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, **names) == "5,6"
    )
    uuids = {"CUDA_VISIBLE_DEVICES": "GPU-aaa, GPU-bbb"}
    assert cuda_visible_devices((1,), environ=uuids, **names) == "GPU-bbb"
    assert cuda_visible_devices((), environ=uuids, **names) == ""  # none placed
    with pytest.raises(ConfigError, match=r"ranks' GPUs \[1, 2\] \(training\.devices\).* 2 GPU"):
        cuda_visible_devices((1, 2), environ=uuids, **names)


def test_one_rank_in_process_trains_on_the_gpu_vllm_leaves_free():
    """training.ranks 1: the update in the worker's own process goes to the placed GPU, not
    GPU 0 where vLLM holds its memory share; torch numbers the GPUs the worker sees, so an
    inherited CUDA_VISIBLE_DEVICES changes nothing but the check."""
    served = _cfg()  # vLLM on GPU 0
    assert in_process_gpu(served, {}) == 1
    assert in_process_gpu(_cfg(**{"training.devices": "3"}), {}) == 3
    assert in_process_gpu(served, {"CUDA_VISIBLE_DEVICES": "6,7"}) == 1  # torch's cuda:1: GPU 7
    with pytest.raises(ConfigError, match=r"training GPU \[1\].*1 GPU\(s\) this process sees"):
        in_process_gpu(served, {"CUDA_VISIBLE_DEVICES": "6"})
    assert in_process_gpu(load_config(None, {"model.device": "cuda"}), {}) == 0  # no vLLM
    assert in_process_gpu(load_config(None, {"model.device": "cpu"}), {}) is None
    assert in_process_gpu(served, {"WORLD_SIZE": "2", "LOCAL_RANK": "1"}) is None  # launched


def test_deepspeed_in_process_gets_the_placed_gpu_as_its_local_rank():
    """DeepSpeed's engine moves the model to LOCAL_RANK's GPU; ours makes a one-process group
    with LOCAL_RANK 0 unless the group's variables are all set, so they come with it."""
    fresh = single_rank_variables(3, {"LOCAL_RANK": "0", "RANK": "0"})
    assert {k: fresh[k] for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR")} == {
        "LOCAL_RANK": "3",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
    }
    assert fresh["MASTER_PORT"].isdigit()
    group = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert single_rank_variables(3, group | {"LOCAL_RANK": "0"}) == {"LOCAL_RANK": "3"}
