"""Where gradients are applied: plain torch (one device) or DeepSpeed ZeRO (one or many ranks).

Both engines give the trainer one small API (:class:`Engine`): ``module`` to call forward on,
``begin_step(n)`` / ``backward(loss)`` / ``finish_step()`` around one optimizer step of ``n``
micro-batches, the optimizer state for checkpoints, and a few collectives (identities on one
rank). The loss the trainer hands to ``backward`` is already scaled to its share of the step
(see :mod:`spade.training.trainer`): engines never rescale it.

Precision. Optimizers always update fp32 weights: AdamW straight on bf16 weights rounds an update
below the weight's bf16 spacing (about |w| / 256) away, so at lr 1e-6 most weights never move.

Both engines (DeepSpeed with ``deepspeed.bf16`` off, the default) cast trainable parameters
that come in bf16 or fp16 to fp32 in place: they are the master weights, exported and
checkpointed as fp32, so no precision is lost from one training stage to the next (each stage
starts from its parent checkpoint's weights; the inference backend casts them to its own dtype
on load). When they came in bf16, forward passes run under ``torch.autocast(bfloat16)``
(:meth:`Engine.autocast`), so compute stays bf16. fp16 weights train in plain fp32 (fp16
autocast would need loss scaling). Memory: fp32 weight, gradient and two Adam moments, 16 bytes
per trained parameter, as in any mixed-precision training. LoRA adapters are fp32 already (peft
upcasts them), so a LoRA model's frozen base is left as it is.

``deepspeed.bf16: true`` instead runs DeepSpeed's own bf16 mode: the module in bf16, fp32 masters
inside its optimizer. A checkpoint's weights files are then bf16 (what a server loads, half the
size), and the fp32 masters travel in each rank's optimizer shard, from which the next stage (of
either role) restores them exactly. It holds less than the fp32-parameter layout: 18 bytes per
parameter of model states instead of 20 under ZeRO-3, no bf16 copy of every weight kept by
autocast's cast cache until the forward ends, a bf16 residual stream (``bench/memory.py``
measures both; the GPU presets use it).

DeepSpeed specifics:

- **Process group.** Launched by ``deepspeed`` / ``torchrun`` (``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` in the environment) the ranks join that
  group; otherwise a single-process group is made (``127.0.0.1``, a free port, rank 0 of 1).
  The backend is gloo on CPU and the accelerator's (NCCL) on GPUs.
- **Compiled ops.** DeepSpeed JIT-compiles C++ ops on first use: its CPU communicator
  (``deepspeed_shm_comm``, loaded at every process-group start on CPU; ~50-75 s to build on 2
  cores) and, when used, ``fused_adam`` (~85 s) / ``cpu_adam`` (~135 s). They are cached under
  ``TORCH_EXTENSIONS_DIR``, which is set to ``$SPADE_CACHE/torch_extensions/<environment>``
  (default ``~/.cache/spade/...``; one folder per Python environment, see
  :mod:`spade.training.extensions`) unless already set, so only the first run of an
  environment pays for them; ``scripts/bootstrap.sh`` builds the communicator there ahead of
  time.
- **Autocast.** DeepSpeed's engine forward turns an outer ``torch.autocast`` off unless its
  config has a ``torch_autocast`` section (``deepspeed/runtime/torch_autocast.py``; it asks
  ``torch.is_autocast_enabled()``, CUDA's state, so only a GPU run shows it). With fp32 masters
  from bf16 weights the section is on, with no "lower-precision-safe" modules: autocast casts
  inside each op as on the torch engine, while ZeRO gathers the fp32 masters and reduces fp32
  gradients, so a 1e-6 update is neither rounded in the gradient nor in the saved weights.
  (DeepSpeed's own bf16 mode instead holds the module in bf16; ``deepspeed.bf16``.)
- **Optimizer.** AdamW: torch's own (``torch_adam``) on CPU and GPU, so no op is compiled at the
  first step (DeepSpeed's fused Adam needs nvcc and a matching host compiler on the node);
  ``DeepSpeedCPUAdam`` when the optimizer state is offloaded.
- **Scoring.** The engine's module is a :class:`~spade.training.scoring.TokenScorer` around the
  model: DeepSpeed's forward runs the whole log-prob computation (chunks of the vocabulary
  projection included), and the model's parameters are the ones it trains.
- **Accumulation.** The number of micro-batches varies from step to step (it follows the token
  budget), so accumulation is unmanaged (``managed_gradient_accumulation: false``): ``backward``
  only accumulates and ``step()`` is the boundary. ``gradient_accumulation_steps`` is still set to
  the step's micro-batch count for DeepSpeed's bookkeeping. ZeRO-2/3 reduce gradients inside
  every backward, so every rank must run as many backward passes as the others: the trainer pads
  short ranks with zero-weighted micro-batches (:meth:`Engine.max_across_ranks`).
"""

from __future__ import annotations

import contextlib
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
from torch import nn

from spade.config import TrainingConfig
from spade.errors import ConfigError
from spade.processes import free_port
from spade.training.extensions import ensure_extensions_dir, extensions_dir
from spade.training.scoring import TokenScorer

__all__ = [
    "DeepSpeedEngine",
    "Engine",
    "TorchEngine",
    "deepspeed_config",
    "ensure_extensions_dir",
    "extensions_dir",
    "make_engine",
]

_ADAM_BETAS = (0.9, 0.999)
_ADAM_EPS = 1e-8
# ZeRO state-dict entries that are Python objects (torch.load(weights_only=True) refuses them)
# and that loading does not need: the static loss scaler (fp32/bf16) and universal-checkpoint maps
_ZERO_OBJECT_KEYS = ("loss_scaler", "param_slice_mappings")


class Engine(ABC):
    """One optimizer over the trainable parameters of ``module``."""

    name: str
    module: nn.Module
    rank: int = 0
    world_size: int = 1

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """Where batches go."""

    @property
    @abstractmethod
    def lr(self) -> float:
        """The learning rate of the next update."""

    def begin_step(self, micro_batches: int) -> None:  # noqa: B027 - optional hook
        """Called before the first backward of a step of ``micro_batches`` backward passes."""

    @abstractmethod
    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate the gradient of ``loss`` (a scalar already scaled to its share)."""

    @abstractmethod
    def finish_step(self) -> float:
        """Clip, update, zero the gradients; the global gradient norm before clipping."""

    @abstractmethod
    def optimizer_state(self) -> dict[str, Any]:
        """This rank's optimizer state (under ZeRO, its own partition: no collective)."""

    @abstractmethod
    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Restore this rank's :meth:`optimizer_state` (after the weights were loaded)."""

    partitions_parameters: bool = False  # ZeRO-3: each rank holds a slice of every parameter

    def gathered(
        self, params: list[nn.Parameter], *, modify: bool = False
    ) -> contextlib.AbstractContextManager[None]:
        """Inside it ``params`` are whole (collective under ZeRO-3); with ``modify``, what rank 0
        writes into them is kept on every rank."""
        return contextlib.nullcontext()

    def set_lr(self, lr: float) -> None:
        """The learning rate of the next updates (an optimizer state loaded from the other
        role's checkpoint carries that role's rate: each role keeps its own)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    optimizer: Any

    def weights_loaded(self) -> None:  # noqa: B027 - optional hook
        """Called after weights were copied into ``module`` outside the optimizer."""

    compute_dtype: torch.dtype | None = None  # autocast dtype of forward passes (None: off)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Around forward passes: bf16 compute over fp32 master weights (see the module
        docstring), or nothing."""
        if self.compute_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.compute_dtype)

    def full_parameters(self) -> contextlib.AbstractContextManager[None]:
        """Inside it every parameter is whole (ZeRO-3 gathers; writes by rank 0 are kept)."""
        return contextlib.nullcontext()

    def sum_across_ranks(self, values: list[float]) -> list[float]:
        return values

    def max_across_ranks(self, value: int) -> int:
        return value

    def max_each_across_ranks(self, values: list[int]) -> list[int]:
        """Element by element, the largest of every rank's ``values`` (same length on all)."""
        return list(values)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        return obj

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on rank 0 (``[]`` elsewhere)."""
        return [obj]

    def barrier(self) -> None:  # noqa: B027 - nothing to wait for on one rank
        pass


def _fp32_masters(params: list[nn.Parameter]) -> torch.dtype | None:
    """Cast bf16/fp16 parameters to fp32 in place (the Parameter objects stay, so tied weights
    and peft's references stay valid); the autocast dtype: bf16 if any was bf16, else None."""
    was_bf16 = any(p.dtype == torch.bfloat16 for p in params)
    for p in params:
        if p.dtype in (torch.bfloat16, torch.float16):
            p.data = p.data.float()
    return torch.bfloat16 if was_bf16 else None


class TorchEngine(Engine):
    """torch.optim.AdamW on fp32 trainable parameters (one process, CPU or one GPU); bf16
    compute under autocast when they came in bf16 (see the module docstring)."""

    name = "torch"

    def __init__(self, model: nn.Module, config: TrainingConfig, lr: float) -> None:
        self.module = TokenScorer(model, config.logprob_chunk_tokens)
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters")
        self.compute_dtype = _fp32_masters(self.params)
        self.grad_clip = config.grad_clip
        self.optimizer = torch.optim.AdamW(
            self.params, lr=lr, betas=_ADAM_BETAS, eps=_ADAM_EPS, weight_decay=config.weight_decay
        )

    @property
    def device(self) -> torch.device:
        return self.params[0].device

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def finish_step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def optimizer_state(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)


# ------------------------------------------------------------------------------------ DeepSpeed


def deepspeed_arch_list(value: str) -> str:
    """``TORCH_CUDA_ARCH_LIST`` as DeepSpeed's op builder can read it: each entry without the
    letter suffix of an architecture-specific target (``9.0a`` -> ``9.0``). The H200 image sets
    ``9.0a``, on which DeepSpeed 0.19.8's ``compute_capability_args`` raises (``int('0a')``)
    before it compiles ``fused_adam`` (seen on the device machine); the plain target builds
    the same optimizer kernels. ``+PTX`` and separators are kept."""
    parts = re.split(r"([;\s]+)", value)
    return "".join(re.sub(r"^(\d+\.\d+)[a-z]+", r"\1", part) for part in parts)


def _init_process_group(on_cpu: bool, timeout_s: float) -> None:
    """Join the launcher's process group, or make a one-process one."""
    import deepspeed

    launched = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    if not all(k in os.environ for k in launched):
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise RuntimeError(
                "WORLD_SIZE > 1 but RANK/MASTER_ADDR/MASTER_PORT are not all set: launch with"
                " `deepspeed` or `torchrun`"
            )
        os.environ.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
            RANK="0",
            WORLD_SIZE="1",
            LOCAL_RANK="0",
        )
    deepspeed.init_distributed(
        dist_backend="gloo" if on_cpu else None,
        auto_mpi_discovery=False,
        timeout=timedelta(seconds=timeout_s),
    )


def deepspeed_config(
    config: TrainingConfig,
    lr: float,
    *,
    on_cpu: bool,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, Any]:
    """The DeepSpeed config dict of ``config`` (see the module docstring for the choices);
    ``autocast_dtype``: the forward's compute dtype over fp32 master weights (None: fp32)."""
    ds = config.deepspeed
    if ds.offload_params and ds.zero_stage != 3:
        raise ConfigError("training.deepspeed.offload_params needs zero_stage 3")
    if ds.offload_optimizer and ds.zero_stage == 0:
        raise ConfigError("training.deepspeed.offload_optimizer needs zero_stage 1, 2 or 3")
    zero: dict[str, Any] = {"stage": ds.zero_stage}
    if ds.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": not on_cpu}
    if ds.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": not on_cpu}
    adam: dict[str, Any] = {
        "lr": lr,
        "betas": list(_ADAM_BETAS),
        "eps": _ADAM_EPS,
        "weight_decay": config.weight_decay,
    }
    if not ds.offload_optimizer:
        adam["torch_adam"] = True  # nothing to compile, on CPU or GPU; the torch engine's numerics
    autocast: dict[str, Any] = {"enabled": False}
    if autocast_dtype is not None:
        # DeepSpeed's forward turns an outer torch.autocast off unless this section is on. No
        # module computes or communicates in bf16 beyond what autocast casts: ZeRO gathers the
        # fp32 masters and reduces fp32 gradients (an empty list of "safe" modules), so what a
        # step updates and what a checkpoint saves are the fp32 masters, as on the torch engine.
        autocast = {
            "enabled": True,
            "dtype": str(autocast_dtype).removeprefix("torch."),
            "lower_precision_safe_modules": [],
        }
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,  # set per step: the step's micro-batch count
        "managed_gradient_accumulation": False,
        "gradient_clipping": config.grad_clip,
        "optimizer": {"type": "AdamW", "params": adam},
        "zero_optimization": zero,
        "bf16": {"enabled": ds.bf16},
        "torch_autocast": autocast,
        "steps_per_print": 2**31 - 1,  # the trainer reports its own metrics
        "wall_clock_breakdown": False,
    }


class DeepSpeedEngine(Engine):
    """``deepspeed.initialize`` around the model; ZeRO stage and offload from the config."""

    name = "deepspeed"

    def __init__(self, model: nn.Module, config: TrainingConfig, lr: float) -> None:
        ensure_extensions_dir()  # before deepspeed compiles anything
        if os.environ.get("TORCH_CUDA_ARCH_LIST"):
            os.environ["TORCH_CUDA_ARCH_LIST"] = deepspeed_arch_list(
                os.environ["TORCH_CUDA_ARCH_LIST"]
            )
        import deepspeed
        import torch.distributed as dist
        from deepspeed.accelerator import get_accelerator

        accelerator = get_accelerator()
        on_cpu = accelerator.device_name() == "cpu"
        if not on_cpu and "LOCAL_RANK" in os.environ:
            accelerator.set_device(int(os.environ["LOCAL_RANK"]))
        _init_process_group(on_cpu, config.dist_timeout_s)
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the model has no trainable parameters")
        self.zero_stage = config.deepspeed.zero_stage
        if not config.deepspeed.bf16:  # else DeepSpeed's bf16 mode keeps its own fp32 masters
            self.compute_dtype = _fp32_masters(params)
        self.ds_config = deepspeed_config(
            config, lr, on_cpu=on_cpu, autocast_dtype=self.compute_dtype
        )
        scorer = TokenScorer(model, config.logprob_chunk_tokens)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=scorer, model_parameters=params, config=self.ds_config
        )
        self.module = self.engine
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self._dist = dist

    @property
    def device(self) -> torch.device:
        return torch.device(self.engine.device)

    @property
    def lr(self) -> float:
        return float(self.engine.get_lr()[0])

    def begin_step(self, micro_batches: int) -> None:
        self.engine.set_train_batch_size(micro_batches * self.world_size)

    def backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss, scale_wrt_gas=False)

    def finish_step(self) -> float:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def optimizer_state(self) -> dict[str, Any]:
        """This rank's state: its ZeRO partition (the fp32 master slice and Adam's moments of
        it), or under stage 0 the whole, replicated state. No collective."""
        if self.zero_stage == 0:
            return dict(self.optimizer.state_dict())
        mine = {k: v for k, v in self.optimizer.state_dict().items() if k not in _ZERO_OBJECT_KEYS}
        return {k: int(v) if k == "zero_stage" else v for k, v in mine.items()}  # an IntEnum

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """This rank's state as :meth:`optimizer_state` gave it; also a format-1 checkpoint's
        ``{"zero": [every rank's]}`` / ``{"replicated": state}``, of which it takes its own."""
        if "replicated" in state:
            state = state["replicated"]
        if "zero" in state:
            partitions = state["zero"]
            if not isinstance(partitions, list) or len(partitions) != self.world_size:
                raise ValueError(
                    f"optimizer state holds {len(partitions or [])} ZeRO partitions, this run"
                    f" has {self.world_size} ranks (resume with the same world size)"
                )
            state = partitions[self.rank]
        if self.zero_stage == 0:
            self.optimizer.load_state_dict(state)
            return
        # the loss scaler was left out of the saved state (a Python object); ours is the same
        scaler = getattr(self.optimizer, "loss_scaler", None)
        mine = {"loss_scaler": scaler, **state}
        # ZeRO reads only this rank's entry of the list (a rigid checkpoint, same world size)
        partitions = [mine if r == self.rank else None for r in range(self.world_size)]
        self.optimizer.load_state_dict(
            partitions, load_optimizer_states=True, load_from_fp32_weights=True
        )

    @property
    def partitions_parameters(self) -> bool:  # type: ignore[override]
        return self.zero_stage == 3

    @contextlib.contextmanager
    def gathered(self, params: list[nn.Parameter], *, modify: bool = False) -> Iterator[None]:
        if self.zero_stage < 3:
            yield
            return
        import deepspeed

        with deepspeed.zero.GatheredParameters(params, modifier_rank=0 if modify else None):
            yield

    def weights_loaded(self) -> None:
        refresh = getattr(self.optimizer, "refresh_fp32_params", None)
        if refresh is not None:  # ZeRO (and bf16) keep fp32 master copies of the weights
            refresh()

    @contextlib.contextmanager
    def full_parameters(self) -> Iterator[None]:
        if self.zero_stage < 3:  # parameters are whole on every rank below stage 3
            yield
            return
        import deepspeed

        params = list(self.engine.module.parameters())
        with deepspeed.zero.GatheredParameters(params, modifier_rank=0):
            yield

    def sum_across_ranks(self, values: list[float]) -> list[float]:
        if self.world_size == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        self._dist.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def max_across_ranks(self, value: int) -> int:
        if self.world_size == 1:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        self._dist.all_reduce(t, op=self._dist.ReduceOp.MAX)
        return int(t.item())

    def max_each_across_ranks(self, values: list[int]) -> list[int]:
        if self.world_size == 1 or not values:
            return list(values)
        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        self._dist.all_reduce(t, op=self._dist.ReduceOp.MAX)
        return [int(v) for v in t.tolist()]

    def broadcast(self, obj: Any) -> Any:
        if self.world_size == 1:
            return obj
        box = [obj]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        if self.world_size == 1:
            return [obj]
        out: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        self._dist.gather_object(obj, out, dst=0)
        return out or []

    def barrier(self) -> None:
        if self.world_size > 1:
            self._dist.barrier()


def make_engine(model: nn.Module, config: TrainingConfig, lr: float) -> Engine:
    """The engine ``config.engine`` names, around ``model``."""
    if config.engine == "deepspeed":
        return DeepSpeedEngine(model, config, lr)
    return TorchEngine(model, config, lr)
