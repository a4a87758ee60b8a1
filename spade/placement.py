"""Which GPUs of the node serve and which train: one answer for the launcher, vLLM, preflight
and ``spade plan``.

A managed vLLM server (``inference.backend: vllm``) takes ``inference.vllm.devices`` (or the
node's first ``tensor_parallel_size x data_parallel_size`` GPUs); the training ranks take
``training.devices`` (or the first ``training.ranks`` GPUs the server does not use). Each process
is then started with ``CUDA_VISIBLE_DEVICES`` set to its own GPUs, so nothing lands on a GPU by
accident. Indices are the node's, as ``nvidia-smi`` (or the worker's own
``CUDA_VISIBLE_DEVICES``) numbers them. Other backends (in-process transformers, llama.cpp, an
external server) reserve no GPU here: an in-process model shares the training GPU by design.

A child process's ``CUDA_VISIBLE_DEVICES`` comes from :func:`cuda_visible_devices`: the indices
themselves, or, in a worker that was itself given a ``CUDA_VISIBLE_DEVICES``, the entries of that
list they number (the vLLM server and the training launcher both start their processes so).

Pure: :func:`placement` reads the config only, :func:`cuda_visible_devices` the config's indices
and an environment; :func:`check_placement` adds the node's GPU count, which
:func:`visible_gpus` reads (``nvidia-smi``; no torch), as :func:`train_gpus` does for ``device:
auto``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spade.config import CampaignConfig
from spade.errors import ConfigError

__all__ = [
    "Placement",
    "check_placement",
    "cuda_visible_devices",
    "placement",
    "train_gpus",
    "uses_gpus",
    "visible_gpus",
]


@dataclass(frozen=True)
class Placement:
    """GPU indices of the node: ``serve`` (the managed vLLM server; empty: none on a GPU) and
    ``train`` (rank ``r`` trains on ``train[r]``; empty: training runs on the CPU)."""

    serve: tuple[int, ...]
    train: tuple[int, ...]

    @property
    def needed(self) -> int:
        """The GPUs the node must have: one past the highest index used (0: none)."""
        return max((*self.serve, *self.train), default=-1) + 1

    @property
    def overlap(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.serve) & set(self.train)))

    def describe(self) -> str:
        def gpus(ids: tuple[int, ...]) -> str:
            return "GPU " + ",".join(map(str, ids)) if ids else "no GPU"

        return f"vLLM serves on {gpus(self.serve)}; training ranks on {gpus(self.train)}"


def uses_gpus(cfg: CampaignConfig, gpus: int | None = None) -> bool:
    """Whether the campaign's model runs on GPUs: ``model.device`` cuda, or auto on a node with
    GPUs (``gpus``: how many are visible; None: unknown, counted as none)."""
    return cfg.model.device == "cuda" or (cfg.model.device == "auto" and bool(gpus))


def placement(cfg: CampaignConfig, gpus: int | None = None) -> Placement:
    """The GPUs each part of ``cfg`` uses (``gpus``: the node's count, for ``device: auto``)."""
    if not uses_gpus(cfg, gpus):
        return Placement((), ())
    serve: tuple[int, ...] = ()
    if cfg.inference.backend == "vllm":
        vllm = cfg.inference.vllm
        serve = tuple(vllm.gpu_indices or range(vllm.gpu_count))
    ranks = cfg.training.ranks
    train = cfg.training.gpu_indices
    if train is None:  # the first GPUs the server leaves free
        free = (i for i in range(len(serve) + ranks) if i not in serve)
        train = [next(free) for _ in range(ranks)]
    return Placement(serve, tuple(train))


def train_gpus(cfg: CampaignConfig) -> tuple[int, ...]:
    """The GPUs the training ranks use (:func:`placement`'s ``train``; ``nvidia-smi`` is asked
    only for ``model.device: auto``); empty when the model does not run on GPUs."""
    gpus = visible_gpus() if cfg.model.device == "auto" else None
    return placement(cfg, gpus).train


def cuda_visible_devices(
    devices: Sequence[int], *, what: str, fields: str, environ: Mapping[str, str] | None = None
) -> str:
    """``devices`` as a child process's ``CUDA_VISIBLE_DEVICES``: the indices themselves, or,
    where this process has a ``CUDA_VISIBLE_DEVICES`` of its own (in ``environ``, default
    ``os.environ``), the entries of that list they number: indices are this process's view of
    the node, as :func:`visible_gpus` counts it. Entries are passed on as written (UUIDs too).
    ``what`` and ``fields`` name whose GPUs they are and the settings that chose them, for the
    error.

    Raises:
        ConfigError: an index past the GPUs this process sees.
    """
    inherited = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if inherited is None or not devices:  # none placed: "" (never set as such)
        return ",".join(map(str, devices))
    seen = [d.strip() for d in inherited.split(",") if d.strip()]
    if max(devices) >= len(seen):
        raise ConfigError(
            f"{what} {list(devices)} ({fields}) are not all among the {len(seen)} GPU(s) this"
            f" process sees (CUDA_VISIBLE_DEVICES={inherited!r})"
        )
    return ",".join(seen[i] for i in devices)


def check_placement(cfg: CampaignConfig, visible: int) -> Placement:
    """:func:`placement`, refused with a :class:`ConfigError` naming the fields when the server
    and the training ranks share a GPU or the node has fewer than ``visible`` GPUs needed."""
    where = placement(cfg, visible)
    if where.overlap:
        raise ConfigError(
            f"inference.vllm.devices and training.devices share GPU(s) {list(where.overlap)}"
            f" ({where.describe()}): vLLM reserves its memory share of every GPU it uses, so a"
            " training rank there runs out of memory; give each its own GPUs"
        )
    if where.needed > visible:
        raise ConfigError(
            f"the config uses GPUs up to index {where.needed - 1} ({where.describe()}), this"
            f" node has {visible} visible GPU(s): set inference.vllm.devices, training.devices"
            " and training.ranks for this node"
        )
    return where


def visible_gpus() -> int:
    """The GPUs this process sees: ``nvidia-smi -L``'s list, narrowed by
    ``CUDA_VISIBLE_DEVICES`` when it is set; 0 without an NVIDIA driver."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    smi = shutil.which("nvidia-smi")
    if smi is None or listed == "":
        return 0
    try:  # a driver that does not answer is a node without usable GPUs
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return 0
    count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    if listed is None:
        return count
    return min(count, len([d for d in listed.split(",") if d.strip()]))
