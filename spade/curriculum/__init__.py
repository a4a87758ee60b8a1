"""The curriculum: regret and the environment memory (docs/architecture.md §2.2, §2.8;
designer rewards are in :mod:`spade.scoring.rewards`).

Pure, stdlib-only code: no torch, no Prefect, and the config models it receives are only read.

- :mod:`~spade.curriculum.regret`: regret estimators by name and the win rate;
- :mod:`~spade.curriculum.memory`: the bounded memory of designs, its prompt examples and
  edit parents;
- :mod:`~spade.curriculum.pool`: seeding it from an existing environment pool.
"""

from spade.curriculum.memory import (
    SEED_ROUND,
    UNKNOWN_SKILL,
    EnvironmentMemory,
    MemoryRecord,
    NegativeLabel,
    negative_label,
    read_declarations,
)
from spade.curriculum.pool import import_pool, seed_records
from spade.curriculum.regret import (
    REGRET_ESTIMATORS,
    RegretEstimator,
    get_regret_estimator,
    instance_gaps,
    max_gap,
    mean_gap,
    paired_regret,
    win_rate,
)

__all__ = [
    "REGRET_ESTIMATORS",
    "SEED_ROUND",
    "UNKNOWN_SKILL",
    "EnvironmentMemory",
    "MemoryRecord",
    "NegativeLabel",
    "RegretEstimator",
    "get_regret_estimator",
    "import_pool",
    "instance_gaps",
    "max_gap",
    "mean_gap",
    "negative_label",
    "paired_regret",
    "read_declarations",
    "seed_records",
    "win_rate",
]
