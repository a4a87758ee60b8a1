"""Multi-rank training pieces: the shards, the config's rules, the launchers' command lines, the
job folder, the failure message, and ``spade train`` on 2 ranks (DeepSpeed on gloo), under
torchrun or launching them itself, training on shards.

The training stage on several ranks inside a flow run is tests/flows/test_train_ranks.py.
A campaign killed while its ranks train is a parent process, a small script, running a job under
the real torchrun whose ranks are a stand-in (tests/training/sleeping_rank.py)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from pydantic import ValidationError

from spade.config import CampaignConfig, TrainingConfig
from spade.errors import ConfigError
from spade.placement import placement
from spade.processes import free_port
from spade.records import DesignAttempt
from spade.training.job import TrainJob, failure_marker, rank_log, read_job, shard, write_job
from spade.training.launcher import LAUNCH_VARS, _failure, launch_command, rank_environment
from spade.training.samples import TrainSample

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n", [0, 1, 5, 8, 9])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shards_cover_the_batch_once_in_order_with_near_equal_sizes(n, world):
    items = list(range(n))
    shards = [shard(items, r, world) for r in range(world)]
    assert [x for s in shards for x in s] == items
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    with pytest.raises(ValueError, match="not in a world"):
        shard(items, world, world)


def test_several_ranks_need_deepspeed_and_one_device_each():
    assert TrainingConfig(engine="deepspeed", ranks=4, devices="4,5,6,7").ranks == 4
    with pytest.raises(ValidationError, match=r"needs training\.engine 'deepspeed'"):
        TrainingConfig(ranks=2)
    with pytest.raises(ValidationError, match="names 1 GPU"):
        TrainingConfig(engine="deepspeed", ranks=2, devices="3")
    with pytest.raises(ValidationError, match="distinct"):
        TrainingConfig(engine="deepspeed", ranks=2, devices="3,3")
    with pytest.raises(ValidationError, match="pattern"):
        TrainingConfig(engine="deepspeed", ranks=2, devices="cuda:0,cuda:1")


def test_the_launchers_start_the_rank_entry_on_the_nodes_ranks(tmp_path):
    torchrun = launch_command(
        TrainingConfig(engine="deepspeed", ranks=4), tmp_path, 29555, placed=True
    )
    assert torchrun[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert torchrun[torchrun.index("--nproc_per_node") + 1] == "4"
    assert torchrun[torchrun.index("--master_port") + 1] == "29555"
    assert torchrun[-3:] == ["-m", "spade.training.launch", str(tmp_path)]
    ds = TrainingConfig(engine="deepspeed", ranks=2, launcher="deepspeed", devices="6,7")
    cmd = launch_command(ds, tmp_path, 29555, placed=True)
    assert cmd[:3] == [sys.executable, "-m", "deepspeed.launcher.runner"]
    assert cmd[-4:] == ["--no_local_rank", "--module", "spade.training.launch", str(tmp_path)]


def _placed(launcher: str, device: str = "cuda", **training: object) -> CampaignConfig:
    """An 8-GPU preset's placement: vLLM on 4 GPUs, 4 ranks on the GPUs it leaves free."""
    return CampaignConfig.model_validate({
        "model": {"device": device},
        "inference": {"backend": "vllm", "vllm": {"data_parallel_size": 4}},
        "training": {"engine": "deepspeed", "ranks": 4, "launcher": launcher} | training,
    })  # fmt: skip


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed"])
def test_both_launchers_get_the_training_gpus_of_the_placement(launcher):
    """Default placement (the GPUs vLLM leaves free) or training.devices; mapped through the
    worker's own CUDA_VISIBLE_DEVICES; the parent's launch variables dropped."""
    cfg = _placed(launcher)
    gpus = placement(cfg).train
    env = rank_environment(cfg.training, gpus, {"RANK": "3", "PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7" and "RANK" not in env
    explicit = _placed(launcher, devices="0,2,5,7").training
    assert rank_environment(explicit, (0, 2, 5, 7), {})["CUDA_VISIBLE_DEVICES"] == "0,2,5,7"
    worker = {"CUDA_VISIBLE_DEVICES": "8,9,10,11,12,13,14,15"}  # the node's second half
    assert rank_environment(cfg.training, gpus, worker)["CUDA_VISIBLE_DEVICES"] == "12,13,14,15"
    with pytest.raises(ConfigError, match=r"ranks' GPUs \[4, 5, 6, 7\].*among the 4 GPU\(s\)"):
        rank_environment(cfg.training, gpus, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"})


def test_on_the_cpu_the_launch_environment_keeps_its_gpus_variable():
    cpu = _placed("deepspeed", device="cpu")
    assert placement(cpu).train == ()
    env = rank_environment(cpu.training, (), {"CUDA_VISIBLE_DEVICES": "3", "LOCAL_RANK": "1"})
    assert env == {"CUDA_VISIBLE_DEVICES": "3", "TOKENIZERS_PARALLELISM": "false"}


def test_deepspeeds_launcher_refuses_gpus_named_by_uuid_torchrun_passes_them_on():
    worker = {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b,GPU-c"}
    torchrun = TrainingConfig(engine="deepspeed", ranks=2)
    assert rank_environment(torchrun, (1, 2), worker)["CUDA_VISIBLE_DEVICES"] == "GPU-b,GPU-c"
    ds = torchrun.model_copy(update={"launcher": "deepspeed"})
    with pytest.raises(ConfigError, match=r"'deepspeed' takes GPU indices.*'GPU-b,GPU-c'"):
        rank_environment(ds, (1, 2), worker)


def _deepspeed_starts(
    command: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, list[int]], list[str], dict[str, str]]:
    """What DeepSpeed's runner (its real ``main``: argument parsing, the include/exclude and
    count rules, the resource filter) starts on the 8-GPU node for our ``command`` under our
    ``env``'s CUDA_VISIBLE_DEVICES: the GPUs of each host (the world info its local launch
    sets CUDA_VISIBLE_DEVICES from for the ranks), that launch's command and environment. The
    launch itself is recorded, not run (the process boundary)."""
    from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator
    from deepspeed.launcher import runner

    class EightGpuNode(CUDA_Accelerator):
        """DeepSpeed's own CUDA accelerator on a node of 8 GPUs (the hardware is the one thing
        stood in for), counted as torch's NVML count does: through CUDA_VISIBLE_DEVICES as it
        is at the time of the call."""

        def device_count(self) -> int:
            listed = os.environ.get("CUDA_VISIBLE_DEVICES")
            return 8 if listed is None else len([d for d in listed.split(",") if d])

    assert command[:3] == [sys.executable, "-m", "deepspeed.launcher.runner"]
    started: list[tuple[list[str], dict[str, str]]] = []

    class Recorded:
        returncode = 0

        def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
            started.append((cmd, env))

        def wait(self) -> int:
            return 0

    node = EightGpuNode()
    monkeypatch.setattr(runner, "get_accelerator", lambda: node)
    monkeypatch.setattr(runner.subprocess, "Popen", Recorded)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if "CUDA_VISIBLE_DEVICES" in env:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env["CUDA_VISIBLE_DEVICES"])
    runner.main(command[3:])
    [(cmd, launch_env)] = started
    [info] = [a.split("=", 1)[1] for a in cmd if a.startswith("--world_info=")]
    return json.loads(base64.urlsafe_b64decode(info)), cmd, launch_env


@pytest.mark.parametrize(
    ("worker", "devices", "ranks", "gpus"),
    [
        ({}, None, 4, [4, 5, 6, 7]),  # the GPUs vLLM (on 0-3) leaves free
        ({}, "1,3,5,7", 4, [1, 3, 5, 7]),
        # a worker given the node's GPUs 2-7: vLLM on its first 4, 2 ranks on its last 2
        ({"CUDA_VISIBLE_DEVICES": "2,3,4,5,6,7"}, None, 2, [6, 7]),
    ],
)
def test_deepspeeds_runner_starts_the_ranks_on_the_placed_gpus(
    tmp_path, monkeypatch, worker, devices, ranks, gpus
):
    """Through DeepSpeed's real runner, our command and environment start one rank on each
    training GPU of the placement, by the node's indices."""
    pytest.importorskip("deepspeed")
    cfg = _placed("deepspeed", devices=devices, ranks=ranks)
    env = rank_environment(cfg.training, placement(cfg).train, worker)
    command = launch_command(cfg.training, tmp_path, 29555, placed=True)
    hosts, launch, launch_env = _deepspeed_starts(command, env, monkeypatch)
    assert hosts == {"localhost": gpus}
    assert "CUDA_VISIBLE_DEVICES" not in launch_env  # the launch sets it from the world info
    assert launch[-2:] == ["spade.training.launch", str(tmp_path)]
    assert {"--module", "--no_local_rank", "--master_port=29555"} <= set(launch)


def test_deepspeeds_runner_on_the_cpu_starts_the_configured_count(tmp_path, monkeypatch):
    pytest.importorskip("deepspeed")
    cpu = TrainingConfig(engine="deepspeed", ranks=2, launcher="deepspeed")
    command = launch_command(cpu, tmp_path, 29555, placed=False)
    hosts, _, _ = _deepspeed_starts(command, rank_environment(cpu, (), {}), monkeypatch)
    assert hosts == {"localhost": [0, 1]}


def test_deepspeeds_runner_refuses_a_node_count_beside_gpus_and_a_gpu_count_drops_them(
    tmp_path, monkeypatch
):
    """Why our command names neither on GPUs: the runner refuses --num_nodes beside an
    --include (also the one it makes of CUDA_VISIBLE_DEVICES), and --num_gpus makes it drop
    CUDA_VISIBLE_DEVICES and start the ranks on GPUs 0..N-1 (where vLLM serves)."""
    pytest.importorskip("deepspeed")
    ours = launch_command(_placed("deepspeed").training, tmp_path, 29555, placed=True)
    visible = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    for extra, env in [(["--num_nodes", "1", "--include", "localhost:4,5,6,7"], {}),
                       (["--num_nodes", "1"], visible)]:  # fmt: skip
        with pytest.raises(ValueError, match="Cannot specify num_nodes/gpus with include/exclude"):
            _deepspeed_starts([*ours[:3], *extra, *ours[3:]], env, monkeypatch)
    count = [*ours[:3], "--num_gpus", "4", *ours[3:]]
    assert _deepspeed_starts(count, visible, monkeypatch)[0] == {"localhost": [0, 1, 2, 3]}


def test_a_job_round_trips_and_a_corrupt_one_is_a_config_error(tmp_path):
    cfg = CampaignConfig.model_validate({"training": {"engine": "deepspeed", "ranks": 2}})
    samples = [TrainSample([1, 2, 3], [0, 1, 1], [0.0, -0.1, -1 / 3], 1.0, "g", 0.1 + 0.2)]
    write_job(tmp_path, TrainJob(cfg, "agent", None, "/ckpt", samples))
    job = read_job(tmp_path)
    assert job.config == cfg and job.samples == samples  # floats exact
    assert job.config.training.ranks == 2
    (tmp_path / "samples.jsonl").write_text('{"input_ids": [1]}\n')
    with pytest.raises(ConfigError, match="unreadable"):
        read_job(tmp_path)


def test_the_error_is_the_rank_that_failed_first_with_its_log_tail(tmp_path):
    (tmp_path / "logs").mkdir()
    for rank, at, last in ((0, 200, "peer closed"), (1, 100, "IndexError: out of range")):
        rank_log(tmp_path, rank).write_text("x" * 10_000 + "\n" + last + "\n")
        failure_marker(tmp_path, rank).write_text(f"{at}\ntraceback")
    error = str(_failure(tmp_path, 3, 1))
    assert error.startswith("training rank 1 of 3 failed, then rank(s) [0] (launcher exit 1)")
    assert error.endswith("IndexError: out of range\n") and "peer closed" not in error
    assert len(error) < 5000  # the tail, not the whole log
    for rank in (0, 1):
        failure_marker(tmp_path, rank).unlink()
    (tmp_path / "logs" / "launcher.log").write_text("torchrun: no such module\n")
    error = str(_failure(tmp_path, 3, 0))
    assert "exited 0 but rank 0 wrote no result" in error
    assert "torchrun: no such module\n" in error  # the launcher's tail, then each rank's
    assert "peer closed" in error and "IndexError: out of range" in error
    assert error.endswith(f"{rank_log(tmp_path, 2)} ends:\n(no log)")
    assert len(error) < 4000 + 3 * 2600  # tails again


def test_a_rank_killed_by_a_signal_leaves_its_python_stack_in_its_log(tmp_path):
    """An abort in C++ raises nothing in Python: faulthandler writes where the rank was."""
    script = (
        "import os, sys\n"
        "import spade.training.launch as launch\n"
        "def aborts_here(folder):\n"
        "    os.abort()\n"
        "launch.run_rank = aborts_here\n"
        "sys.exit(launch.main([sys.argv[1]]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS} | {"RANK": "1"}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, timeout=120)
    assert run.returncode < 0  # killed by the signal, no exit code of its own
    text = rank_log(tmp_path, 1).read_text()
    assert "Fatal Python error: Aborted" in text and "aborts_here" in text
    assert not failure_marker(tmp_path, 1).exists()
    assert "aborts_here" in str(_failure(tmp_path, 2, 1))  # the stage's error shows it


# a campaign's process: runs a 2-rank job whose ranks are the stand-in that sleeps, until killed
PARENT = """
import sys
from pathlib import Path
import spade.training.launcher as launcher
from spade.config import TrainingConfig
launcher.ENTRY = "tests.training.sleeping_rank"
launcher.run_job(TrainingConfig(engine="deepspeed", ranks=2), Path(sys.argv[1]))
"""


def test_a_killed_process_leaves_no_launcher_and_no_rank_running(tmp_path, monkeypatch):
    """SIGKILL of the process waiting on the launch (``kill -9`` of ``spade run``, an OOM
    kill): torchrun, whose ranks run in sessions of their own, is stopped with SIGTERM and
    stops them, so no rank keeps its GPU from the resumed campaign."""
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    job = tmp_path / "job"
    job.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS} | {"PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(job)], cwd=ROOT, env=env)
    pid_files = [job / f"rank-{r}.pid" for r in range(2)]
    deadline = time.monotonic() + 120  # a safety net: the assertions below say what went wrong
    try:  # whatever is seen, nothing of the job outlives the test
        while parent.poll() is None and not all(f.exists() for f in pid_files):
            assert time.monotonic() < deadline, "the ranks never started"
            time.sleep(0.1)
        assert parent.poll() is None, (job / "logs" / "launcher.log").read_text()
        ranks = [int(f.read_text()) for f in pid_files]
        (launcher,) = [p.pid for p in psutil.Process(parent.pid).children()
                       if "torch.distributed.run" in p.cmdline()]  # fmt: skip
        parent.kill()
        parent.wait()
        while not all(map(_gone, [launcher, *ranks])) and time.monotonic() < deadline + 60:
            time.sleep(0.1)
        assert [pid for pid in [launcher, *ranks] if not _gone(pid)] == []
    finally:
        parent.kill()
        parent.wait()
        for p in _job_processes(job):
            with contextlib.suppress(psutil.NoSuchProcess):  # it may end on its own meanwhile
                p.kill()
    said = (job / "logs" / "launcher.log").read_text()
    assert f"pid {parent.pid} is gone: stopping training launcher (torchrun, 2 ranks)" in said


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie waiting for its reaper has)."""
    try:  # it may be reaped while we look
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _job_processes(job: Path) -> list[psutil.Process]:
    """Processes still running the job in ``job`` (their command line names it)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if str(job) in (p.info["cmdline"] or []):
            found.append(p)
    return found


def _attempts(path: Path, n: int) -> Path:
    rows = []
    for i in range(n):
        attempt = DesignAttempt(slot=i, attempt=0, skill="logic", doc_id="d", messages=[],
                                prompt_token_ids=[10, 11, 12 + i], token_ids=[40 + i, 41, 42],
                                logprobs=[-3.0, -3.0, -3.0])  # fmt: skip
        rows.append(json.dumps(attempt.to_dict() | {"reward": float(i % 2)}))
    path.write_text("\n".join(rows) + "\n")
    return path


def _spade_train(tmp_path: Path, launch: list[str], **training: object) -> dict[str, str]:
    """``spade train`` on 5 scored design attempts (a tiny policy) started by ``launch``; its
    printed metrics, after checking that it reported once, on 5 samples over 2 ranks."""
    pytest.importorskip("deepspeed")
    from spade.testing.scripted_designer import write_tiny_policy

    policy = tmp_path / "policy"
    if not policy.exists():
        write_tiny_policy(policy)
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(  # YAML reads JSON
            {
                "name": "cli-ranks",
                "storage": {"root": str(tmp_path / "store")},
                "model": {"name_or_path": str(policy), "device": "cpu"},
                "training": {"engine": "deepspeed", "designer_lr": 1e-2, **training},
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env |= {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    cmd = [*launch, "-m", "spade.cli", "train", "--config", str(config), "--role", "designer",
           "-t", str(_attempts(tmp_path / "attempts.jsonl", 5)),
           "--checkpoints", str(tmp_path / "ckpt")]  # fmt: skip
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    words = " ".join(run.stdout.split())  # the title wraps at the table's width
    assert words.count("designer update on 5 samples on 2 ranks") == 1  # rank 0 only
    rows = [line.strip("│ ").split("│") for line in run.stdout.splitlines()
            if line.startswith("│ ") and line.count("│") == 3]  # fmt: skip
    return {k.strip(): v.strip() for k, v in rows} | {"output": words}


def test_spade_train_under_torchrun_trains_each_rank_on_its_shard(tmp_path):
    """2 ranks x their shards of 5 attempts: the step counts 5 samples (not 10), rank 0 alone
    reports and writes the one checkpoint."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_addr", "127.0.0.1", "--master_port", str(free_port())]  # fmt: skip
    metrics = _spade_train(tmp_path, torchrun)
    assert metrics["samples"] == "5" and metrics["step"] == "1"
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["step-00000001"]


@pytest.mark.slow  # in `make test`: the stage's own launch of 2 ranks (tests/flows/
# test_train_ranks.py), `spade train` on 2 ranks (above), 2 ZeRO-3 ranks resumed exactly
# (tests/training/test_zero3_checkpoint.py)
def test_spade_train_launches_training_ranks_itself_and_resumes(tmp_path):
    """Not under a launcher, with training.ranks 2: it launches the ranks as the stage does;
    the second call resumes the first's checkpoint (ZeRO state of 2 ranks)."""
    first = _spade_train(tmp_path, [sys.executable], ranks=2)
    assert first["samples"] == "5" and first["step"] == "1"
    second = _spade_train(tmp_path, [sys.executable], ranks=2)
    assert second["step"] == "2"
    assert f"(parent {tmp_path / 'ckpt' / 'step-00000001'})" in second["output"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "step-00000001",
        "step-00000002",
    ]
