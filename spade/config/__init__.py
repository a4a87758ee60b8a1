"""One typed configuration tree for a SPADE campaign, loadable from YAML.

Every number of the design (``docs/architecture.md``) is a field here with the reference
implementation's default, a docstring and bounds. Flow parameters are these models, so the
Prefect UI renders a form for them. ``resolved_yaml()`` is what gets saved beside every run.

The tree is split by section; import from the package (``from spade.config import
CampaignConfig, load_config``), which is its API:

- :mod:`~spade.config.campaign`: :class:`CampaignConfig`, :func:`load_config` and the run,
  sandbox, storage, held-out and metrics sections;
- :mod:`~spade.config.model`: the model and its inference backend (vLLM, llama.cpp, ...);
- :mod:`~spade.config.roles`: corpus, designer, evaluation, scoring and memory;
- :mod:`~spade.config.training`: GRPO training, LoRA and DeepSpeed;
- :mod:`~spade.config.verify`: the verifier's settings (``sandbox.verify``).

Importing it loads pydantic and yaml only: nothing of the sandbox, the verifier or torch
(``tests/test_import_light.py``).
"""

from spade.config.campaign import (
    CampaignConfig,
    HeldoutSuiteConfig,
    MetricsConfig,
    RunConfig,
    SandboxConfig,
    StorageConfig,
    SuiteName,
    load_config,
)
from spade.config.model import (
    InferenceConfig,
    LlamaCppServerConfig,
    ModelConfig,
    VllmContainerConfig,
    VllmServerConfig,
)
from spade.config.roles import (
    COGNITIVE_SKILLS,
    TOOL_SKILLS,
    CorpusConfig,
    DesignerConfig,
    EvaluationConfig,
    MemoryConfig,
    ScoringConfig,
)
from spade.config.training import CheckpointsConfig, DeepSpeedConfig, LoraConfig, TrainingConfig
from spade.config.verify import DEFAULT_GARBAGE_ACTIONS, VerifyConfig

__all__ = [
    "COGNITIVE_SKILLS",
    "DEFAULT_GARBAGE_ACTIONS",
    "TOOL_SKILLS",
    "CampaignConfig",
    "CheckpointsConfig",
    "CorpusConfig",
    "DeepSpeedConfig",
    "DesignerConfig",
    "EvaluationConfig",
    "HeldoutSuiteConfig",
    "InferenceConfig",
    "LlamaCppServerConfig",
    "LoraConfig",
    "MemoryConfig",
    "MetricsConfig",
    "ModelConfig",
    "RunConfig",
    "SandboxConfig",
    "ScoringConfig",
    "StorageConfig",
    "SuiteName",
    "TrainingConfig",
    "VerifyConfig",
    "VllmContainerConfig",
    "VllmServerConfig",
    "load_config",
]
