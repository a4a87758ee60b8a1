"""The trainer's state and checkpoints: what :class:`~spade.training.trainer.GRPOTrainer`
saves, resumes and publishes (weights, optimizer, step, RNG), collectively across ranks."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from spade.config import TrainingConfig
from spade.errors import CheckpointError
from spade.inference.adapters import adapter_tensors, full_tensors, load_adapter_tensors
from spade.inference.checkpoints import (
    CheckpointInfo,
    LoadedCheckpoint,
    latest_checkpoint,
    load_checkpoint,
)
from spade.training import checkpoint as ckpt
from spade.training.engines import Engine
from spade.training.rng import capture_rng_state, restore_rng_state
from spade.training.weights import adapter_config, load_full_tensors

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

    def state_dict(self) -> dict[str, Any]:
        """Trainer state: step, role, RNG states (one per rank) and optimizer (collective)."""
        return {
            "step": self.global_step,
            "role": self.role,
            "engine": self.engine.name,
            "world_size": self.engine.world_size,
            "rng": self.engine.gather(capture_rng_state()),
            "optimizer": self.engine.optimizer_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (weights are loaded separately, before this). The
        optimizer's moments and step go on whichever role saved them (one optimizer for the
        shared model); the learning rate stays this role's own."""
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
    ) -> str:
        """A checkpoint ``{root}/step-{global_step:08d}`` (written by rank 0); its URI.

        Kind ``"full"`` holds every weight, and with ``model_files``
        (:func:`~spade.training.weights.hf_model_files`: config, tokenizer) it is a model
        folder transformers and vLLM load; kind ``"lora"`` only the adapter tensors and
        ``adapter_config.json`` (the folder is a peft adapter folder; resuming needs the same
        base weights). The optimizer state and the trainer state (step, RNG) go along.
        """
        tensors = self.export_weights(merged=False)
        state = self.state_dict()
        optimizer = state.pop("optimizer")
        uri = None
        if self.engine.rank == 0:
            uri = ckpt.save_checkpoint(
                root,
                self.global_step,
                tensors=tensors,
                kind=self.kind,
                optimizer_state=optimizer,
                trainer_state=state,
                config_hash=ckpt.config_hash(self.config),
                parent=parent,
                adapter_config=self.adapter_config() if self.lora else None,
                model_files=model_files,
                storage_options=storage_options,
            )
        uri = self.engine.broadcast(uri)
        self.engine.barrier()
        return str(uri)

    def resume(
        self, root: str, *, storage_options: dict[str, Any] | None = None
    ) -> CheckpointInfo | None:
        """Load the newest complete checkpoint under ``root``; None when there is none."""
        info = latest_checkpoint(root, storage_options)
        if info is None:
            return None
        loaded = load_checkpoint(info.uri, storage_options=storage_options)
        self.load_checkpoint(loaded)
        return info

    def load_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        """Weights, optimizer and trainer state from a loaded checkpoint of the same kind."""
        self.load_weights(loaded)
        state = dict(loaded.trainer_state or {})
        state["optimizer"] = loaded.optimizer_state
        state.setdefault("step", loaded.step)
        self.load_state_dict(state)

    def load_weights(self, loaded: LoadedCheckpoint) -> None:
        """Only the weights (full or adapter) of a loaded checkpoint of the same kind."""
        kind = loaded.manifest.get("kind")
        if kind != self.kind:
            raise CheckpointError(
                f"{loaded.info.uri} is a {kind!r} checkpoint, training is {self.kind!r}"
            )
        if loaded.info.config_hash and loaded.info.config_hash != ckpt.config_hash(self.config):
            log.warning("resuming %s under a changed training config", loaded.info.uri)
        with self.engine.full_parameters():
            if self.lora:
                load_adapter_tensors(self.model, loaded.tensors)
            else:
                load_full_tensors(self.model, loaded.tensors)
        self.engine.weights_loaded()
