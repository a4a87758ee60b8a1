"""The data every layer passes: designs, verdicts, environments, plays, evaluations, weights.

This package sits at the bottom of the layers (``docs/architecture.md``; enforced by the
import-linter contracts in ``pyproject.toml``): it imports nothing of the project, so a role
package, the scoring, the training and the pipeline can all share these types without
importing each other. Everything here is a plain dataclass with its JSON form
(``to_dict``/``from_dict`` where the stores keep it); behaviour lives in the layers above.

- :mod:`~spade.records.designs`: :class:`DesignAttempt`, :class:`Verdict` (with its
  :class:`CheckResult` list) and the classified :class:`Failure` / :class:`FailureKind`;
- :mod:`~spade.records.plays`: :class:`EnvSpec`, :class:`Trajectory` (with its :class:`Turn`)
  and :class:`EnvEvaluation`;
- :mod:`~spade.records.weights`: :class:`WeightsRef` and :data:`BASE`.
"""

from spade.records.designs import (
    INFERENCE,
    CheckResult,
    DesignAttempt,
    Failure,
    FailureKind,
    Verdict,
    env_id_for,
)
from spade.records.plays import EnvEvaluation, EnvSource, EnvSpec, Status, Trajectory, Turn
from spade.records.weights import BASE, WeightsRef

__all__ = [
    "BASE",
    "INFERENCE",
    "CheckResult",
    "DesignAttempt",
    "EnvEvaluation",
    "EnvSource",
    "EnvSpec",
    "Failure",
    "FailureKind",
    "Status",
    "Trajectory",
    "Turn",
    "Verdict",
    "WeightsRef",
    "env_id_for",
]
