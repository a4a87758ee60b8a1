"""Playing whole episodes through a session, and the random/empty policies of the checks."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spade.records import Failure, FailureKind
from spade.sandbox.failures import EnvFailure
from spade.sandbox.session import JailedSession

Policy = Callable[[int, str], str]  # (turn index, last observation) -> action


@dataclass
class Episode:
    """One played episode: the transcript and how it ended."""

    first_observation: str
    steps: list[tuple[str, str, float, bool, bool, dict[str, Any]]] = field(default_factory=list)

    @property
    def terminated(self) -> bool:
        return bool(self.steps) and self.steps[-1][3]

    @property
    def ended(self) -> bool:
        return bool(self.steps) and (self.steps[-1][3] or self.steps[-1][4])

    @property
    def final_reward(self) -> float:
        return self.steps[-1][2] if self.steps else 0.0

    def episode_return(self) -> float:
        """docs/architecture.md §2.6: the last reward clipped to [-1, 1] if terminated, else 0."""
        return max(-1.0, min(1.0, self.final_reward)) if self.terminated else 0.0

    def succeeded(self, threshold: float) -> bool:
        return self.terminated and self.final_reward >= threshold

    def transcript(self) -> str:
        """A canonical text form, for comparing two plays."""
        return json.dumps([self.first_observation, self.steps], sort_keys=True, default=repr)


def clip(text: str, limit: int = 100) -> str:
    """``text`` on one line, cut to ``limit`` characters, quoted: an observation in a reason."""
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def check_reward(reward: float, low: float, high: float) -> None:
    if not low <= reward <= high:
        raise EnvFailure(
            Failure(FailureKind.CONTRACT, f"reward {reward} outside [{low:g}, {high:g}]"),
            fatal=False,
        )


def play(
    session: JailedSession,
    seed: int,
    policy: Policy,
    *,
    max_steps: int,
    reward_range: tuple[float, float],
) -> Episode:
    """Reset with ``seed`` and step ``policy``'s actions until the episode ends or
    ``max_steps`` steps were taken. Contract violations raise EnvFailure."""
    obs, _info = session.reset(seed)
    episode = Episode(first_observation=obs)
    for turn in range(max_steps):
        action = policy(turn, obs)
        obs, reward, terminated, truncated, info = session.step(action)
        check_reward(reward, *reward_range)
        episode.steps.append((action, obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return episode


def scripted(actions: Sequence[str], filler: str = "") -> Policy:
    """Play ``actions`` in order, then ``filler`` forever."""
    return lambda turn, _obs: actions[turn] if turn < len(actions) else filler


WORD = re.compile(r"[A-Za-z0-9_-]{1,20}")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
"""A number as text: an integer or a decimal, its sign included."""


def random_policy(rng: random.Random, tool_names: Sequence[str]) -> Policy:
    """Random moves shaped like real ones: boxed numbers/words, tool calls, answers."""

    def act(_turn: int, obs: str) -> str:
        words = WORD.findall(obs) or ["x"]
        token = rng.choice([str(rng.randint(0, 100)), rng.choice(words), rng.choice("abcdxyz")])
        if tool_names and rng.random() < 0.7:
            name = rng.choice(list(tool_names))
            return f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>'
        if tool_names:
            return f"<answer>{token}</answer>"
        return "\\boxed{" + token + "}"

    return act
