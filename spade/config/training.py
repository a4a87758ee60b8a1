"""GRPO training of both roles: optimiser, batches, LoRA and DeepSpeed."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from spade.config.base import Section


class LoraConfig(Section):
    """Low-rank adapters (peft) instead of full fine-tuning."""

    enabled: bool = Field(False, description="Train LoRA adapters instead of all weights.")
    rank: int = Field(16, ge=1, le=1024, description="Adapter rank r.")
    alpha: int = Field(32, ge=1, le=4096, description="LoRA alpha (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapter input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="Module names that get adapters.",
    )


class DeepSpeedConfig(Section):
    """DeepSpeed ZeRO settings (engine 'deepspeed')."""

    zero_stage: int = Field(
        2,
        ge=0,
        le=3,
        description="ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also parameters.",
    )
    bf16: bool = Field(
        False,
        description="DeepSpeed's own bf16 mode: module in bf16, fp32 masters only inside its"
        " optimizer (each rank's optimizer shard: resumed exactly), weights files in bf16; less"
        " memory (bench/memory.py; the GPU presets' choice). Off: the trainer's mixed precision,"
        " as on the torch engine: fp32 parameters (checkpointed as such) with bf16 autocast when"
        " the model loads in bf16 (model.dtype 'auto' on GPU).",
    )
    offload_optimizer: bool = Field(False, description="Keep optimizer state in CPU memory.")
    offload_params: bool = Field(False, description="Keep parameters in CPU memory (stage 3).")


class CheckpointsConfig(Section):
    """How training checkpoints are written and how many are kept."""

    keep_last: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Training checkpoints kept per campaign, newest first (with their staged"
        " serving copies); older ones are deleted after each round's publish stage, except one"
        " still published or needed by a running stage. None: keep every one.",
    )
    shard_mb: int = Field(
        4096,
        ge=1,
        le=1_000_000,
        description="Largest full-weights file in MiB: bigger models are saved in shards with"
        " transformers' index, each serialised in memory once and written by one rank in turn.",
    )


class TrainingConfig(Section):
    """GRPO updates of the agent and the designer (docs/architecture.md §2.9)."""

    engine: Literal["torch", "deepspeed"] = Field(
        "torch", description="Plain torch (CPU or one GPU) or DeepSpeed ZeRO."
    )
    ranks: int = Field(
        1,
        ge=1,
        le=64,
        description="Training processes on this node, one per GPU (gloo on CPU). 1: the stage"
        " trains in its own process; more: it launches `launcher` over them, each on a"
        " contiguous shard of the batch (needs engine 'deepspeed').",
    )
    launcher: Literal["torchrun", "deepspeed"] = Field(
        "torchrun",
        description="What starts the ranks when ranks > 1: torchrun (torch.distributed.run) or"
        " DeepSpeed's own `deepspeed` launcher.",
    )
    devices: str | None = Field(
        None,
        pattern=r"^\d{1,4}(,\d{1,4})*$",
        description="GPU indices the ranks train on, one per rank, as CUDA_VISIBLE_DEVICES"
        " writes them ('4,5,6,7'), at ranks 1 too (the update in the stage's own process);"
        " the node's indices as the worker sees them (through its own CUDA_VISIBLE_DEVICES,"
        " if set). None: the first `ranks` GPUs the managed vLLM server leaves free (from GPU 0"
        " with another inference backend). Unused when the model runs on the CPU.",
    )
    lr: float = Field(1e-6, gt=0.0, le=1.0, description="Learning rate of the agent (AdamW).")
    designer_lr: float = Field(
        1e-6, gt=0.0, le=1.0, description="Learning rate of designer updates."
    )
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="AdamW weight decay.")
    grad_clip: float = Field(1.0, gt=0.0, le=1e6, description="Gradient-norm clip.")
    eps_low: float = Field(
        0.2, ge=0.0, le=1.0, description="Lower clip of the policy ratio (1 - eps_low)."
    )
    eps_high: float = Field(
        0.28, ge=0.0, le=10.0, description="Upper clip of the policy ratio (1 + eps_high)."
    )
    kl_coef: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Weight of the KL penalty to the reference policy (reference: 0 to 0.005).",
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k3", description="KL estimator; k3 is the low-variance unbiased one."
    )
    aggregation: Literal["token_mean", "sequence_mean", "token_sum"] = Field(
        "token_mean", description="How token losses become the batch loss."
    )
    is_cap: float = Field(
        2.0,
        ge=0.0,
        le=1e6,
        description="Truncation of importance weights against the behaviour log-probs (0: off).",
    )
    advantage_std: bool = Field(
        True, description="Divide group-centred agent rewards by the group's std (z-score)."
    )
    agent_envs_per_update: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="The agent trains on the unhinted plays of at most this many environments"
        " per update: those whose plays' returns differ (a gradient) first, then a seeded"
        " order (None: every environment played). bench/learning.py sets it to"
        " designer.envs_per_round in both arms, so a round where more designs pass than it has"
        " slots trains on as many episodes as the pool arm.",
    )
    micro_batch_tokens: int = Field(
        8192,
        ge=16,
        le=10_000_000,
        description="Token budget of one micro-batch (padding included).",
    )
    activation_checkpointing: bool = Field(
        False,
        description="Recompute each decoder layer's activations in the backward pass instead of"
        " keeping them (transformers' gradient checkpointing, non-reentrant): a layer keeps only"
        " its input, about 2 x tokens x hidden bytes in bf16, for a third more compute. On in"
        " the GPU presets, where a micro-batch's activations would not fit otherwise"
        " (`spade plan` shows both).",
    )
    logprob_chunk_tokens: int = Field(
        1024,
        ge=1,
        le=1_000_000,
        description="Trained positions scored per chunk of the vocabulary projection: the fp32"
        " logits of a chunk (tokens x vocabulary x 4 bytes, 0.6 GB at 1024 x 152k) live at once,"
        " never a whole micro-batch's; a chunk's logits are recomputed in the backward pass.",
    )
    updates_per_batch: int = Field(
        1,
        ge=1,
        le=64,
        description="Optimizer steps per batch of samples: the batch is split into this many"
        " mini-batches, pi_old's log-probs taken once before the first (PPO's and GRPO's several"
        " updates per rollout batch, where the clipped ratio bounds the later ones; 1: one"
        " on-policy step, ratio 1).",
    )
    measure_shift: bool = Field(
        False,
        description="After each update, score its batch again (one forward pass without"
        " gradient, about a third of a step) and report how far the update moved the policy:"
        " `shift_kl` (KL from the weights before, per trained token) and `shift_up` /"
        " `shift_down` (mean log-prob change per token of the samples with a positive /"
        " negative advantage; a working update raises the first and lowers the second).",
    )
    designer_copy_mask: Literal["off", "positive", "all"] = Field(
        "off",
        description="Leave out of the designer's loss the answer tokens copied from its prompt"
        " (runs of `designer_copy_ngram` tokens found there, where a splice shows its parent):"
        " 'positive' in answers with a positive advantage only (train what a kept answer"
        " changed, still push down all of a worse one), 'all' in every answer, 'off' trains"
        " every token (spade/training/copied.py). An experiment: the 0.5B's kept splices"
        " copied almost nothing, and the mask changed nothing measured"
        " (docs/results/designer_learnability.md).",
    )
    designer_copy_ngram: int = Field(
        8,
        ge=1,
        le=1024,
        description="Shortest run of answer tokens, found as is in the prompt, that counts as"
        " copied (designer_copy_mask): shorter shared fragments ('self.', 'return') stay"
        " trained.",
    )
    designer_delay_steps: int = Field(
        2,
        ge=0,
        le=1000,
        description="Designer updates run this many steps late, with importance correction.",
    )
    dist_timeout_s: float = Field(
        3600.0,
        ge=60.0,
        le=86_400.0,
        description="Timeout of the training ranks' collectives (the process group's): longer"
        " than the slowest collective, a checkpoint save included (each rank writes its own"
        " shard in parallel; DeepSpeed's default is 10 minutes).",
    )
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed of training-side randomness.")
    lora: LoraConfig = Field(default_factory=LoraConfig)
    deepspeed: DeepSpeedConfig = Field(default_factory=DeepSpeedConfig)

    @model_validator(mode="after")
    def _ranks_need_deepspeed(self) -> TrainingConfig:
        # the torch engine is one process: several ranks would each train alone on a shard
        if self.ranks > 1 and self.engine != "deepspeed":
            raise ValueError("training.ranks > 1 needs training.engine 'deepspeed'")
        gpus = self.gpu_indices
        if gpus is not None and len(gpus) != self.ranks:
            raise ValueError(f"training.devices names {len(gpus)} GPU(s) for {self.ranks} rank(s)")
        if gpus is not None and len(set(gpus)) != len(gpus):
            raise ValueError("training.devices must be distinct GPU indices")
        return self

    @property
    def gpu_indices(self) -> list[int] | None:
        """``devices`` as a list of GPU indices (None: not set)."""
        return None if self.devices is None else [int(d) for d in self.devices.split(",")]
