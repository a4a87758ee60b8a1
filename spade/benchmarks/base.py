"""The held-out suite contract: a suite's tasks are sandboxed text environments.

A suite builds, for a seeded subset of its benchmark, one environment source per item
(``HeldoutTask.code``): standard library plus ``spade.envs`` only, because it runs in the jail
like a design does, and the agent's text (answers, programs, tool calls) is only ever handled
there. The environment's return is the item's score in [0, 1] unless the suite rescores the
trajectory (``Suite.score``) with trusted data that never executes the agent's text.

Every task's first observation starts with :func:`task_header` (``[task <suite>/<id>]``), so
transcripts name their item and scripted test policies can tell tasks apart.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from statistics import fmean
from typing import TYPE_CHECKING, Any, Protocol, get_args

from spade.config import SuiteName
from spade.registry import lookup

if TYPE_CHECKING:
    from spade.records import Trajectory


@dataclass(frozen=True)
class HeldoutTask:
    """One benchmark item as a text environment.

    ``code`` defines exactly one environment class (the contract of ``spade.envs``);
    ``gold`` is what a perfect agent would send, turn by turn (tests script a policy with it);
    ``meta`` is trusted item data the suite may need to score a trajectory.
    """

    suite: str
    task_id: str
    code: str
    tool_use: bool = False
    gold: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def env_id(self) -> str:
        return f"{self.suite}/{self.task_id}"


def task_header(suite: str, task_id: str) -> str:
    """The first line of a task's first observation."""
    return f"[task {suite}/{task_id}]"


class Suite(Protocol):
    """A held-out benchmark: a seeded subset of its items, and how a play is scored."""

    name: str
    default_max_turns: int

    def tasks(self, size: int, seed: int, subsets: list[str]) -> list[HeldoutTask]:
        """``size`` items (fewer if the benchmark is smaller), the same for the same seed."""
        ...

    def score(self, task: HeldoutTask, trajectory: Trajectory) -> float:
        """The item's score for one play, in [0, 1]."""
        ...


def episode_score(trajectory: Trajectory) -> float:
    """A play's return (last reward if terminated, else 0: docs/architecture.md §2.6), in [0, 1]."""
    return max(0.0, trajectory.episode_return())


def suite_score(scores: list[float]) -> float:
    """Mean item score of a suite (0.0 for no items)."""
    return fmean(scores) if scores else 0.0


SUITE_NAMES: tuple[str, ...] = get_args(SuiteName)
"""Every suite name, as the config accepts them."""

# Module per suite name, imported on first use: each pulls in its benchmark package.
_SUITE_MODULES = {
    "reasoning_gym": "spade.benchmarks.reasoning_gym",
    "humaneval": "spade.benchmarks.humaneval",
    "bfcl_multi_turn": "spade.benchmarks.bfcl",
}


def get_suite(name: str) -> Suite:
    """The suite called ``name`` (its module's ``SUITE``); ValueError naming the valid ones."""
    module = importlib.import_module(lookup(_SUITE_MODULES, name, "held-out suite"))
    suite: Suite = module.SUITE
    return suite
