"""Skill rotation: which skills are active in a regeneration and which slot gets which."""

from __future__ import annotations

from collections.abc import Sequence

SKILL_DESCRIPTIONS = {
    "mathematical_reasoning": "computing, estimating or deriving quantities step by step",
    "logical_deduction": "drawing certain conclusions from constraints and clues",
    "spatial_reasoning": "tracking positions, shapes, directions and movement",
    "pattern_recognition": "finding the rule behind sequences, grids or examples",
    "optimization": "choosing the best option under constraints and budgets",
    "causal_inference": "working out causes from interventions and observations",
    "api_orchestration": "combining several API calls whose outputs feed each other",
    "data_retrieval": "finding the right records with search and lookup tools",
    "state_modification": "changing system state correctly with write tools",
    "error_recovery": "noticing failed calls and recovering from them",
    "tool_selection": "choosing the right tool among similar ones",
    "multi_step_workflows": "completing a long procedure in the right order",
}


def active_skills(skills: Sequence[str], regeneration: int, k: int) -> list[str]:
    """The ``k`` skills active in ``regeneration``: a window sliding round-robin by ``k``."""
    n = len(skills)
    return [skills[(regeneration * k + i) % n] for i in range(min(k, n))]


def slot_skills(active: Sequence[str], slots: int) -> list[str]:
    """Skill of each of ``slots`` design slots: the active skills in turn."""
    return [active[i % len(active)] for i in range(slots)]
