"""The whole campaign's configuration tree (:class:`CampaignConfig`), its run, sandbox,
storage and metrics sections, and :func:`load_config` (YAML plus dotted overrides).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from spade.config.base import Section
from spade.config.model import InferenceConfig, ModelConfig
from spade.config.pools import pool_ref
from spade.config.roles import (
    CorpusConfig,
    DesignerConfig,
    EvaluationConfig,
    MemoryConfig,
    ScoringConfig,
)
from spade.config.training import CheckpointsConfig, TrainingConfig
from spade.config.verify import VerifyConfig
from spade.errors import ConfigError


class SandboxConfig(Section):
    """The jail's policy file and the verifier's settings."""

    policy_path: Path | None = Field(
        None, description="Sandbox policy YAML (default: infra/sandbox.yaml)."
    )
    workers: int = Field(
        2, ge=1, le=256, description="Designs verified in parallel (each runs its own jails)."
    )
    verify: VerifyConfig = Field(default_factory=VerifyConfig)


class StorageConfig(Section):
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


SuiteName = Literal["reasoning_gym", "humaneval", "bfcl_multi_turn"]
"""The held-out suites (spade/benchmarks/ has a module for each)."""


class HeldoutSuiteConfig(Section):
    """One held-out benchmark suite played after each round (see spade/benchmarks/)."""

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


class MetricsConfig(Section):
    """Where per-round numbers go besides the object store (which stays the source of truth)."""

    wandb: bool = Field(False, description="Log each round's summary to Weights & Biases.")
    wandb_project: str = Field("spade", min_length=1, description="W&B project name.")
    wandb_mode: Literal["online", "offline"] = Field(
        "offline", description="W&B mode; offline runs sync later with `wandb sync`."
    )
    tensorboard_dir: str | None = Field(
        None, description="Write TensorBoard event files here (local path; None: off)."
    )
    tables: bool = Field(
        True,
        description="With W&B or TensorBoard on, also log each round's designs (code, verdict,"
        " hint, win rates, regret, designer reward) and a sample of its rollouts as tables"
        " (a W&B table, TensorBoard text; docs/tracker.md).",
    )
    rollout_samples: int = Field(
        8,
        ge=0,
        le=256,
        description="Plays in each round's rollouts table: a draw seeded by the master seed and"
        " the round, spread over the environments played, unhinted and hinted alternating"
        " (0: no rollouts table).",
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


class RunConfig(Section):
    """How a campaign runs: how many rounds, which stages, which task runner."""

    rounds: int = Field(
        1, ge=0, le=1_000_000, description="Rounds to run (0: until stopped or cancelled)."
    )
    train: bool = Field(True, description="Run the training stages (else they are skipped).")
    overlap: int = Field(
        0,
        ge=0,
        le=1,
        description="Rounds in flight beside a training one. 0: rounds run one after another,"
        " each serving the weights the round before published. 1: round r+1 designs, verifies,"
        " hints and plays while round r trains and publishes, served by the newest weights"
        " published when it starts (round r-1's: one round stale, recorded in every stage's"
        " manifest); its training continues from round r's weights. A campaign run overlaps"
        " its rounds; a lone spade-round run waits for nothing and needs round r-1 published.",
    )
    retry_backoff_s: float = Field(
        10.0,
        ge=0.0,
        le=3600.0,
        description="Seconds before the first retry of a stage that retries any failure (the"
        " model's stages: design, hint, plays, publish, held-out; the corpus read); each later"
        " retry waits twice as long. A store failure of the other stages retries after"
        " storage.write_retry_delay_s.",
    )
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
    heldout_base: bool = Field(
        True,
        description="Round 0's held-out stage also plays the held-out set with the base weights"
        " (stored beside the round's own results as base/), so every later round's held-out"
        " numbers have the untrained model's to compare with.",
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
        description="Environment .py files, folders of them, or pool:<name> (a pool `spade"
        " pool import` stored in storage.root; its accepted environments); one or a list, for"
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
    pool_envs_min: int = Field(
        0,
        ge=0,
        le=10_000,
        description="A designed round plays at least this many environments drawn from"
        " env_pool beside its designs, however many designs it accepted: the agent trains on a"
        " game known to give partial credit even when every design scores 0 on every play (0:"
        " only what min_envs fills).",
    )

    def draws_pool(self) -> bool:
        """Whether a round can draw from ``env_pool``: pool mode, ``min_envs`` to reach, or
        ``pool_envs_min`` to play."""
        return self.env_source == "pool" or self.min_envs > 0 or self.pool_envs_min > 0

    @field_validator("env_pool")
    @classmethod
    def _pool_names(cls, pool: str | list[str] | None) -> str | list[str] | None:
        for entry in [pool] if isinstance(pool, str) else pool or []:
            pool_ref(entry)  # a malformed pool:<name> fails here, not in the round
        return pool

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


class CampaignConfig(Section):
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
    checkpoints: CheckpointsConfig = Field(default_factory=CheckpointsConfig)
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
