"""The curriculum: regret, designer rewards and the environment memory
(docs/architecture.md §2.2, §2.7, §2.8).

Pure, stdlib-only code: no torch, no Prefect, and the config models it receives are only read.

- :mod:`~spade.curriculum.regret`: regret estimators by name and the win rate;
- :mod:`~spade.curriculum.rewards`: designer rewards by name, their centring per skill;
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
    max_gap,
    mean_gap,
    win_rate,
)
from spade.curriculum.rewards import (
    DESIGNER_REWARDS,
    DesignerReward,
    DesignOutcome,
    blend,
    centre_per_skill,
    designer_rewards,
    get_designer_reward,
    learning_potential,
    plateau,
    update_ema,
)

__all__ = [
    "DESIGNER_REWARDS",
    "REGRET_ESTIMATORS",
    "SEED_ROUND",
    "UNKNOWN_SKILL",
    "DesignOutcome",
    "DesignerReward",
    "EnvironmentMemory",
    "MemoryRecord",
    "NegativeLabel",
    "RegretEstimator",
    "blend",
    "centre_per_skill",
    "designer_rewards",
    "get_designer_reward",
    "get_regret_estimator",
    "import_pool",
    "learning_potential",
    "max_gap",
    "mean_gap",
    "negative_label",
    "plateau",
    "read_declarations",
    "seed_records",
    "update_ema",
    "win_rate",
]
