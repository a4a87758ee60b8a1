"""The trainer's state and checkpoints: what :class:`~spade.training.trainer.GRPOTrainer`
saves, resumes and publishes (weights, optimizer, step, RNG), collectively across ranks."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from spade.config import TrainingConfig
from spade.errors import CheckpointError
from spade.inference.adapters import adapter_tensors, full_tensors, load_adapter_tensors
from spade.inference.checkpoint_reader import CheckpointReader
from spade.inference.checkpoints import (
    ADAPTER_CONFIG,
    TRAINER,
    WEIGHTS_FILES,
    WEIGHTS_INDEX,
    CheckpointInfo,
    latest_checkpoint,
    optimizer_shard_name,
)
from spade.inference.models import check_weights_fit
from spade.training import checkpoint as ckpt
from spade.training.engines import Engine
from spade.training.rng import capture_rng_state, restore_rng_state
from spade.training.weights import adapter_config

__all__ = ["TrainerState"]

log = logging.getLogger(__name__)


class TrainerState:
    """State, export and checkpoint methods of the GRPO trainer (a mixin: the trainer sets the
    attributes below in its ``__init__``)."""

    config: TrainingConfig
    role: Literal["agent", "designer"]
    lora: bool
    model: nn.Module
    engine: Engine
    global_step: int
    lr: float  # this role's learning rate

    @property
    def kind(self) -> Literal["full", "lora"]:
        return "lora" if self.lora else "full"

    def state_dict(self, *, optimizer: bool = True) -> dict[str, Any]:
        """Trainer state: step, role, RNG states (every rank's, on rank 0: collective) and,
        with ``optimizer``, this rank's optimizer state."""
        state: dict[str, Any] = {
            "step": self.global_step,
            "role": self.role,
            "engine": self.engine.name,
            "world_size": self.engine.world_size,
            "rng": self.engine.gather(capture_rng_state()),
        }
        if optimizer:
            state["optimizer"] = self.engine.optimizer_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (weights are loaded separately, before this; ``rng``
        holds every rank's, ``optimizer`` this rank's). The optimizer's moments and step go on
        whichever role saved them (one optimizer for the shared model); the learning rate stays
        this role's own."""
        if state.get("world_size", 1) != self.engine.world_size:
            raise CheckpointError(
                f"state saved by {state.get('world_size')} ranks, this run has"
                f" {self.engine.world_size}: resume with the same world size"
            )
        self.global_step = int(state["step"])
        rngs = state.get("rng") or []
        if len(rngs) > self.engine.rank:
            restore_rng_state(rngs[self.engine.rank])
        if state.get("optimizer"):
            self.engine.load_optimizer_state(state["optimizer"])
            self.engine.set_lr(self.lr)

    def export_weights(self, *, merged: bool = True) -> dict[str, torch.Tensor]:
        """Weights to publish, CPU copies (collective under ZeRO-3).

        Full fine-tune, or LoRA with ``merged``: every weight under the model's own names (what
        ``TransformersBackend.reload`` takes), adapters merged in. LoRA without ``merged``: the
        adapter tensors under peft's names (see :meth:`adapter_config`).
        """
        with self.engine.full_parameters():
            if self.lora and not merged:
                return adapter_tensors(self.model)
            return full_tensors(self.model)

    def adapter_config(self) -> dict[str, Any]:
        """``adapter_config.json`` of the LoRA adapter (ValueError for a full fine-tune)."""
        if not self.lora:
            raise ValueError("a full fine-tune has no adapter config")
        return adapter_config(self.model)

    def save_pretrained(self, folder: str | Path) -> None:
        """A local folder: the LoRA adapter (peft's layout) or the full model (transformers')."""
        with self.engine.full_parameters():
            if self.engine.rank == 0:
                self.model.save_pretrained(str(folder))  # type: ignore[operator]
        self.engine.barrier()

    def save(
        self,
        root: str,
        *,
        storage_options: dict[str, Any] | None = None,
        parent: str | None = None,
        model_files: dict[str, bytes] | None = None,
        shard_bytes: int = ckpt.DEFAULT_SHARD_BYTES,
    ) -> str:
        """A checkpoint ``{root}/step-{global_step:08d}``, its URI (collective: every rank
        writes its own files, rank 0 the manifest last; see :mod:`spade.training.checkpoint`).

        Kind ``"full"`` holds every weight (fp32 masters; shards of at most ``shard_bytes``,
        each written by one rank in turn), and with ``model_files``
        (:func:`~spade.training.weights.hf_model_files`: config, tokenizer) it is a model
        folder transformers and vLLM load; kind ``"lora"`` only the adapter tensors and
        ``adapter_config.json`` (a peft adapter folder; resuming needs the same base weights).
        Every rank streams its own optimizer state into its own file; the trainer state (step,
        every rank's RNG) goes along.
        """
        e = self.engine
        fs, path = ckpt.step_path(root, self.global_step, storage_options)
        if e.rank == 0:
            ckpt.check_model_files(model_files)
            ckpt.prepare_folder(fs, path)
        e.barrier()  # the folder exists, empty, before any rank writes into it
        files = self._save_weights(fs, path, shard_bytes)
        name = optimizer_shard_name(e.rank, e.world_size)
        files[name] = ckpt.save_torch(fs, f"{path}/{name}", e.optimizer_state())
        state = self._trainer_json()  # collective: every rank's RNG
        if e.rank == 0:
            files[TRAINER] = ckpt.write_file(fs, f"{path}/{TRAINER}", json.dumps(state).encode())
            if self.lora:
                data = json.dumps(self.adapter_config(), indent=2).encode()
                files[ADAPTER_CONFIG] = ckpt.write_file(fs, f"{path}/{ADAPTER_CONFIG}", data)
            for extra, data in (model_files or {}).items():
                files[extra] = ckpt.write_file(fs, f"{path}/{extra}", data)
        everyone = e.gather(files)
        uri = None
        if e.rank == 0:
            merged = {n: entry for part in everyone for n, entry in part.items()}
            uri = ckpt.commit_manifest(
                fs,
                path,
                step=self.global_step,
                kind=self.kind,
                files=merged,
                config_hash=ckpt.config_hash(self.config),
                parent=parent,
                world_size=e.world_size,
            )
        uri = e.broadcast(uri)
        e.barrier()
        return str(uri)

    def _trainer_json(self) -> dict[str, Any]:
        """``trainer.json``: :meth:`state_dict` less the optimizer (collective)."""
        return self.state_dict(optimizer=False)

    def _save_weights(self, fs: Any, path: str, shard_bytes: int) -> dict[str, ckpt.FileEntry]:
        """This rank's weights files (collective under ZeRO-3: every shard is gathered by all,
        kept by its writer, rank ``shard % world_size``; the ranks then write in parallel)."""
        e = self.engine
        if self.lora:  # small: rank 0 writes the one adapter file
            with e.gathered(self._trainable()):
                tensors = adapter_tensors(self.model) if e.rank == 0 else {}
            if e.rank != 0:
                return {}
            name = WEIGHTS_FILES["lora"]
            return {name: ckpt.save_safetensors(fs, f"{path}/{name}", tensors)}
        named = self.model.state_dict(keep_vars=True)  # tied weights under each of their names
        sizes = [(n, _numel(t) * t.element_size()) for n, t in named.items()]
        shards = ckpt.plan_shards(sizes, shard_bytes)
        names, index = ckpt.shard_files(shards)
        mine: dict[str, dict[str, torch.Tensor]] = {}
        for i, shard in enumerate(shards):
            params = _unique_params(named[n] for n in shard)
            with e.gathered(params):
                if i % e.world_size == e.rank:
                    mine[names[i]] = {n: named[n].detach().to("cpu", copy=True) for n in shard}
        files = {n: ckpt.save_safetensors(fs, f"{path}/{n}", t) for n, t in mine.items()}
        if index is not None and e.rank == 0:
            files[WEIGHTS_INDEX] = ckpt.write_file(fs, f"{path}/{WEIGHTS_INDEX}", index)
        return files

    def _trainable(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def resume(
        self, root: str, *, storage_options: dict[str, Any] | None = None
    ) -> CheckpointInfo | None:
        """Load the newest complete checkpoint under ``root``; None when there is none."""
        info = latest_checkpoint(root, storage_options, verify="size")  # reading verifies
        if info is None:
            return None
        self.load_from(info.uri, storage_options=storage_options)
        return info

    def load_from(self, uri: str, *, storage_options: dict[str, Any] | None = None) -> list[str]:
        """Weights, this rank's optimizer shard and the trainer state of checkpoint ``uri``
        (collective). Each rank reads only what it needs: its own optimizer shard; under ZeRO-3
        a full fine-tune's weights come back from the shards' fp32 masters, without reading
        the weights files; otherwise rank 0 (ZeRO-3) or every rank reads them tensor by tensor.
        CheckpointError for another kind or another world size. Returns the files this rank
        read (beyond the manifest)."""
        with CheckpointReader(uri, storage_options) as reader:
            kind = reader.manifest.get("kind")
            if kind != self.kind:
                raise CheckpointError(f"{uri} is a {kind!r} checkpoint, training is {self.kind!r}")
            if reader.info.config_hash and reader.info.config_hash != ckpt.config_hash(self.config):
                log.warning("resuming %s under a changed training config", uri)
            e = self.engine
            optimizer = reader.optimizer_state(e.rank, e.world_size)
            state = dict(reader.json_file(TRAINER) or {})
            sharded = reader.manifest.get("format", 1) >= 2 and optimizer is not None
            if not (sharded and e.partitions_parameters and not self.lora):
                self._load_weights(reader)
            state["optimizer"] = optimizer
            state.setdefault("step", reader.info.step)
            self.load_state_dict(state)
            return reader.read_files

    def _load_weights(self, reader: CheckpointReader) -> None:
        """The checkpoint's weights into the model (collective under ZeRO-3)."""
        e = self.engine
        if self.lora:
            with e.gathered(self._trainable(), modify=True):
                load_adapter_tensors(self.model, reader.tensors())
        else:
            where = reader.weight_map()
            check_weights_fit(self.model, reader.tensor_shapes())
            named = self.model.state_dict(keep_vars=True)
            done: set[int] = set()
            for name, tensor in named.items():
                if id(tensor) in done or name not in where:  # tied: loaded under another name
                    continue
                done.add(id(tensor))
                with e.gathered(_unique_params([tensor]), modify=True):
                    if e.rank == 0 or not e.partitions_parameters:
                        with torch.no_grad():
                            tensor.data.copy_(reader.tensor(name, where[name]))
        e.weights_loaded()


def _numel(t: torch.Tensor) -> int:
    """Elements of a weight, whole (a ZeRO-3 parameter's ``ds_numel``)."""
    return int(getattr(t, "ds_numel", t.numel()))


def _unique_params(tensors: Iterable[torch.Tensor]) -> list[nn.Parameter]:
    """The parameters among ``tensors``, each once (tied weights appear under several names)."""
    out: dict[int, nn.Parameter] = {}
    for t in tensors:
        if isinstance(t, nn.Parameter):
            out.setdefault(id(t), t)
    return list(out.values())
