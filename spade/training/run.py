"""One training update from saved rollouts or scored designs (``spade train``).

Loads the configured model, resumes the newest checkpoint under the root, whichever role wrote
it (one model, one optimizer: repeated calls of either role continue one chain), takes one GRPO
step on the file's samples and saves a new checkpoint whose manifest names its parent. Under
``torchrun``/``deepspeed`` every rank takes its shard of the samples and rank 0 writes; with
``training.ranks`` > 1 and no launcher it launches its ranks itself. Also the update itself
from a parent checkpoint (:func:`update_from_parent`), which the training stage runs in
process or on every launched rank.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from spade.config import CampaignConfig
from spade.errors import ConfigError
from spade.records import DesignAttempt, Trajectory
from spade.training.job import JobResult

Role = Literal["agent", "designer"]


@dataclass(frozen=True)
class TrainResult:
    metrics: dict[str, float | int]
    checkpoint: str
    resumed_from: str | None
    samples: int  # in the whole batch (metrics count those trained, over all ranks)
    rank: int = 0  # this process's rank under a launcher
    world_size: int = 1


def checkpoint_root(cfg: CampaignConfig) -> str:
    """``spade train``'s default checkpoint root: one for both roles, as the flows chain them
    (one model, one optimizer: each update resumes the newest checkpoint whichever role wrote
    it)."""
    return f"{cfg.storage.root.rstrip('/')}/{cfg.name}/checkpoints"


def _rows(path: Path) -> list[dict[str, Any]]:
    try:
        return [
            json.loads(line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    except (OSError, ValueError) as exc:  # unreadable file or a line that is not JSON
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def _designer_rewards(
    cfg: CampaignConfig,
    path: Path,
    rows: list[dict[str, Any]],
    attempts: list[DesignAttempt],
    evaluations: Path | None,
) -> list[float]:
    """Each attempt's ``reward`` field (uncentred: training centres it), else the configured
    designer reward of the attempts' first answers, scored with ``evaluations`` (``spade
    evaluate``'s rows for the designed environments)."""
    if all("reward" in r for r in rows):
        return [float(r["reward"]) for r in rows]
    if evaluations is None:
        raise ConfigError(
            f"{path}: designer training needs rewards: attempts with a 'reward' field, or"
            " --evaluations with `spade evaluate`'s evaluations.jsonl of the designed envs"
        )
    from spade.records import EnvEvaluation
    from spade.scoring.outcomes import score

    fields = set(EnvEvaluation.__dataclass_fields__) - {"trajectories"}
    played = [
        EnvEvaluation(**{k: v for k, v in r.items() if k in fields}) for r in _rows(evaluations)
    ]
    missing = sorted({a.env_id or "" for a in attempts if a.accepted} - {e.env_id for e in played})
    if missing:
        raise ConfigError(f"{evaluations}: no evaluation of accepted design(s) {missing}")
    scored, _ = score(attempts, played, cfg.scoring)
    return [s.trained_raw for s in scored]  # the first answers' own: centred once, in training


def agent_samples(cfg: CampaignConfig, trajectories: Iterable[Trajectory]) -> list[Any]:
    """The agent's samples of ``trajectories`` (unhinted plays), advantages z-scored within
    each environment's plays; of at most ``training.agent_envs_per_update`` environments
    (:func:`matched_envs`)."""
    from spade.training.samples import assign_advantages, samples_from_trajectories

    played = matched_envs(list(trajectories), cfg.training.agent_envs_per_update, cfg.seed)
    samples = samples_from_trajectories(played)
    assign_advantages(samples, scale_by_std=cfg.training.advantage_std)
    return list(samples)


def matched_envs(trajectories: list[Trajectory], limit: int | None, seed: int) -> list[Trajectory]:
    """The plays of at most ``limit`` environments of ``trajectories`` (all: None), in their
    order: environments whose unhinted plays' returns differ (a gradient) first, the rest after,
    each kind in an order seeded by ``seed`` and the environment's id."""
    envs = list(dict.fromkeys(t.env_id for t in trajectories))
    if limit is None or len(envs) <= limit:
        return trajectories
    returns: dict[str, set[float]] = {}
    for t in trajectories:
        if not t.hinted and not t.failed:
            returns.setdefault(t.env_id, set()).add(t.episode_return())

    def rank(env_id: str) -> tuple[bool, str]:
        flat = len(returns.get(env_id, set())) < 2
        return flat, hashlib.sha256(f"{seed}:{env_id}".encode()).hexdigest()

    kept = set(sorted(envs, key=rank)[:limit])
    return [t for t in trajectories if t.env_id in kept]


def designer_samples(
    cfg: CampaignConfig, attempts: Sequence[DesignAttempt], rewards: Sequence[float]
) -> list[Any]:
    """The designer's samples of ``attempts``: ``rewards`` (uncentred, each the reward of the
    answer trained on) centred once, per skill or over the batch as ``scoring`` says, over
    the trained designs (one unit each, however many parts it was sampled in); the tokens
    copied from the prompt masked as ``training.designer_copy_mask`` says."""
    from spade.training.advantages import designer_estimator
    from spade.training.copied import mask_copied
    from spade.training.samples import assign_advantages, samples_from_design_attempts

    samples = samples_from_design_attempts(attempts, rewards)
    assign_advantages(samples, designer_estimator(cfg.scoring.centre_per_skill))
    t = cfg.training  # copies masked after centring: a design's advantage counts all it wrote
    return mask_copied(samples, t.designer_copy_mask, t.designer_copy_ngram)


def load_samples(
    cfg: CampaignConfig, role: Role, path: Path, evaluations: Path | None = None
) -> list[Any]:
    """Training samples (with advantages) from ``trajectories.jsonl`` (agent) or design
    attempts (designer: ``spade design``'s ``attempts.jsonl`` with ``evaluations``, or
    attempts that carry a ``reward``); attempts that failed on our side are left out."""
    rows = _rows(path)
    if role == "agent":
        return agent_samples(cfg, (Trajectory.from_dict(r) for r in rows))
    pairs = [(r, DesignAttempt.from_dict(r)) for r in rows]
    kept = [(r, a) for r, a in pairs if not a.failed]  # an outage is no data: no reward
    rows, attempts = [r for r, _ in kept], [a for _, a in kept]
    rewards = _designer_rewards(cfg, path, rows, attempts, evaluations)
    return designer_samples(cfg, attempts, rewards)


def in_process_gpu(cfg: CampaignConfig, environ: Mapping[str, str]) -> int | None:
    """The GPU an update in this process trains on, as torch numbers them (``cuda:<it>``): the
    one training GPU of the placement (:func:`spade.placement.train_gpus`: ``training.devices``,
    or the first GPU the managed vLLM server leaves free). None on the CPU, and on a launched
    rank (``WORLD_SIZE`` in ``environ`` above 1), which trains on its ``LOCAL_RANK`` among the
    GPUs its launcher was given. Torch numbers the GPUs this process sees as the placement
    does, so the index needs no mapping, only a check against an inherited
    ``CUDA_VISIBLE_DEVICES``.

    Raises:
        ConfigError: the GPU is past those this process sees.
    """
    from spade.placement import cuda_visible_devices, train_gpus

    if int(environ.get("WORLD_SIZE", "1")) > 1:
        return None
    gpus = train_gpus(cfg)  # nvidia-smi only for device auto
    if not gpus:  # the model is not on GPUs
        return None
    cuda_visible_devices(  # an index past the inherited list is refused, naming the fields
        gpus,
        what="the training GPU",
        fields="training.devices, or the first GPU vLLM leaves free",
        environ=environ,
    )
    return gpus[0]


def single_rank_variables(gpu: int, environ: Mapping[str, str]) -> dict[str, str]:
    """What DeepSpeed needs in the environment to train one in-process rank on ``gpu``:
    ``LOCAL_RANK`` (the device its engine sets and moves the model to) and, unless ``environ``
    has them all, a one-process group's ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
    ``MASTER_PORT``: without them the engine makes that group itself
    (:mod:`spade.training.engines`) and sets ``LOCAL_RANK`` 0, the GPU vLLM may hold."""
    from spade.processes import free_port

    out = {"LOCAL_RANK": str(gpu)}
    if all(k in environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return out  # a group was made before (an earlier update): the engine joins it
    return out | {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }


def build_trainer(cfg: CampaignConfig, role: Role) -> tuple[Any, dict[str, bytes] | None]:
    """A GRPO trainer on the configured model (with the KL's reference model when a full
    fine-tune needs one), and the model files its full-weight checkpoints carry so that each
    is a loadable model folder (None for LoRA). On GPUs, one rank in this process loads onto
    the training GPU of the placement (:func:`in_process_gpu`), a launched rank (``LOCAL_RANK``
    set) onto its own GPU."""
    from spade.inference.models import load_model_and_tokenizer, resolve_model
    from spade.training.trainer import GRPOTrainer
    from spade.training.weights import hf_model_files

    gpu = in_process_gpu(cfg, os.environ)
    if gpu is not None or (cfg.model.device != "cpu" and "LOCAL_RANK" in os.environ):
        import torch

        if torch.cuda.is_available():  # "cuda" is the current device: the placed GPU, or its own
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) if gpu is None else gpu)
        if gpu is not None and cfg.training.engine == "deepspeed":
            os.environ.update(single_rank_variables(gpu, os.environ))
    resolved = resolve_model(cfg.model)
    model, tokenizer = load_model_and_tokenizer(resolved, cfg.model.dtype, cfg.model.device)
    lora = cfg.training.lora.enabled
    files = None if lora else hf_model_files(model, tokenizer)
    ref = None
    if cfg.training.kl_coef > 0 and not lora:
        ref = load_model_and_tokenizer(resolved, cfg.model.dtype, cfg.model.device)[0]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    temperature = sampling_temperature(cfg, role)
    trainer = GRPOTrainer(
        model, pad, cfg.training, role=role, ref_model=ref, temperature=temperature
    )
    return trainer, files


def sampling_temperature(cfg: CampaignConfig, role: Role) -> float:
    """The temperature ``role``'s trained samples are drawn at: the agent's unhinted plays
    (``evaluation.temperature``), the designer's answers (``designer.temperature``)."""
    return cfg.evaluation.temperature if role == "agent" else cfg.designer.temperature


def trainer_from_parent(
    cfg: CampaignConfig, role: Role, parent: str | None
) -> tuple[Any, dict[str, bytes] | None]:
    """The trainer at the weights of checkpoint ``parent`` (None: the configured base model),
    and (full fine-tuning) the model files its checkpoints carry to be loadable model folders.

    One model, one optimizer (as the reference trains both roles): the parent's optimizer
    state (AdamW's moments and step), step count and RNG come along whichever role wrote it, so
    an agent update after a designer update continues the optimizer the chain has carried
    since its first update; only the learning rate is the role's own. Before, the chain
    alternated roles and every update was a fresh AdamW's first step (about ``lr * sign(g)``
    per weight, whatever the advantages' size). Collective under several DeepSpeed ranks
    (every rank loads the parent)."""
    trainer, files = build_trainer(cfg, role)
    if parent is None:
        return trainer, files
    # weights, this rank's shard of the shared optimizer's state, step; own lr
    trainer.load_from(parent, storage_options=cfg.storage.storage_options)
    return trainer, files


def train_once(
    cfg: CampaignConfig,
    role: Role,
    data: Path,
    checkpoints: str | None = None,
    evaluations: Path | None = None,
) -> TrainResult:
    """One update on the samples in ``data``, resuming the newest checkpoint under
    ``checkpoints``. Under a launcher (``WORLD_SIZE`` > 1: ``torchrun``/``deepspeed`` started
    this process on every rank) each rank trains on its contiguous shard of the samples
    (advantages computed on all of them first) and the checkpoint is written by rank 0 only;
    not launched, with ``training.ranks`` > 1, it launches that many ranks itself."""
    from spade.inference.checkpoints import latest_checkpoint

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and cfg.training.engine != "deepspeed":
        raise ConfigError(
            f"launched on {world} ranks, but training.engine is {cfg.training.engine!r}:"
            " several ranks train together only with engine 'deepspeed'"
        )
    samples = load_samples(cfg, role, data, evaluations)
    if not samples:
        raise ConfigError(
            f"{data}: no trainable samples (hinted plays and empty turns are skipped)"
        )
    root = checkpoints or checkpoint_root(cfg)
    if world == 1 and cfg.training.ranks > 1:  # not launched: launch the ranks, as the stage
        return _launched(cfg, role, samples, root)
    previous = latest_checkpoint(root, cfg.storage.storage_options, verify="size")  # loads verify
    parent = previous.uri if previous else None
    update = update_from_parent(cfg, role, parent, samples, root)
    return TrainResult(
        update.metrics, update.checkpoint, parent, len(samples), update.rank, update.world_size
    )


def _launched(cfg: CampaignConfig, role: Role, samples: list[Any], root: str) -> TrainResult:
    """:func:`train_once` on ``training.ranks`` ranks it launches (as the training stage does),
    from the newest checkpoint under ``root``."""
    from spade.inference.checkpoints import latest_checkpoint
    from spade.training.launcher import train_on_ranks

    previous = latest_checkpoint(root, cfg.storage.storage_options, verify="size")  # loads verify
    parent = previous.uri if previous else None
    result = train_on_ranks(cfg, role, parent, samples, root)
    ranks = cfg.training.ranks
    return TrainResult(result.metrics, result.checkpoint, parent, len(samples), 0, ranks)


def update_from_parent(
    cfg: CampaignConfig, role: Role, parent: str | None, samples: Sequence[Any], root: str
) -> JobResult:
    """One GRPO update of ``role`` from checkpoint ``parent`` (None: the base model) on this
    rank's contiguous shard of ``samples`` (all of them in a single process), saved under
    ``root`` with ``parent`` named in its manifest. Its metrics are the step's and
    ``zero_variance_groups``, the share of the batch's groups with no gradient. Collective
    under several DeepSpeed ranks: each loads the parent and steps on its shard, rank 0 writes
    the one checkpoint."""
    from spade.training.job import shard
    from spade.training.samples import flat_group_share

    trainer, files = trainer_from_parent(cfg, role, parent)
    rank, world = trainer.engine.rank, trainer.engine.world_size
    device = trainer.engine.device
    _reset_peak(device)
    metrics = {**trainer.step(shard(samples, rank, world)).to_dict(), **trainer.last_shift}
    for r, peak in enumerate(trainer.engine.gather(_peak(device))):  # rank 0 gets them all
        metrics[f"peak_memory_rank{r}"] = peak
    # of the whole batch, not a rank's shard: a group split across ranks is still one group
    metrics["zero_variance_groups"] = flat_group_share(samples)
    uri = trainer.save(
        root,
        storage_options=cfg.storage.storage_options,
        parent=parent,
        model_files=files,
        shard_bytes=cfg.checkpoints.shard_mb * 2**20,
    )
    kind = trainer.kind
    del trainer  # the model, its optimizer and activations: freed before the heap is trimmed
    release_host_memory()
    return JobResult(metrics, uri, kind, rank, world)


def _reset_peak(device: Any) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: Any) -> int:
    """The most memory this rank's step held: on a GPU the allocator's peak of live tensors
    (what ``spade plan`` predicts), on the CPU the process's peak resident memory."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated(device))
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def release_host_memory() -> None:
    """Hand freed heap memory back to the OS after an update. glibc keeps freed blocks under
    its mmap threshold (which grows to 32 MB: most of a model's tensors) in its arenas, so a
    long-lived process would otherwise hold an update's peak between rounds, beside the
    inference server and the jails. glibc only; elsewhere nothing to do."""
    gc.collect()
    try:  # not glibc (musl, macOS): no malloc_trim
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
