"""The agent role: multi-turn rollouts of a model against sandboxed environments."""

from spade.agent.actions import extract_action
from spade.agent.rollout import EpisodeJob, RolloutSettings, run_episodes

__all__ = ["EpisodeJob", "RolloutSettings", "extract_action", "run_episodes"]
