"""What a play is: one episode's record (its turns, tokens, log-probs, reward and timing), the
environment it was played on, and one environment's evaluation (its plays and the numbers the
curriculum needs).

How an episode ended (``status``) tells whose it was when it did not end normally:
``env_failed`` is the environment's own failure (data about the design: return 0, counted
like any play); ``inference_failed`` is a failure of OUR side (the model server down, a
request error, a request timeout, or the jail's wall limit running out while the episode
waited for the model: failure kind ``session_expired``): it says nothing about the
environment, so such a play (:attr:`Trajectory.failed`) is left out of win rates, regret, the
EMA, the memory and training, and only counted. ``context_limit`` is the conversation
outgrowing the model's context: a property of the episode, a play like any other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal[
    "terminated", "truncated", "turn_limit", "context_limit", "env_failed", "inference_failed"
]


@dataclass
class Turn:
    """One agent turn: the prompt it saw, what it generated, and what the environment said."""

    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]  # one per completion token
    text: str  # the agent's full reply
    action: str  # what was sent to step()
    observation: str  # what step() answered
    reward: float
    terminated: bool
    truncated: bool
    finish_reason: str
    generate_s: float
    step_s: float
    step_started_at: float = 0.0  # epoch seconds when step() was called (0.0: not recorded)


@dataclass
class Trajectory:
    """One episode of one environment instance, hinted or not.

    ``messages`` is the whole conversation (system, observations as user turns, replies as
    assistant turns). ``failure`` is a dict ``{"kind", "reason"}`` when the environment or the
    model failed; the episode then ends as data with return 0 (see the module docstring for
    which failures are left out of every measure: :attr:`failed`).
    """

    env_id: str
    seed: int
    hinted: bool
    hint: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    status: Status = "truncated"
    model: str = ""
    failure: dict[str, str] | None = None
    reset_s: float = 0.0  # getting a session (a jail start if none was idle) and reset()
    wall_s: float = 0.0  # the whole episode, reset included: >= reset_s + every turn's times
    # fresh sessions the episode went on in after one ran past its wall limit waiting on the
    # model (its moves replayed there and answered alike: spade.agent.rollout)
    resumed: int = 0

    @property
    def terminated(self) -> bool:
        return self.status == "terminated"

    @property
    def failed(self) -> bool:
        """Our side failed (inference): the play measures nothing and is only counted."""
        return self.status == "inference_failed"

    @property
    def final_reward(self) -> float:
        return self.turns[-1].reward if self.turns else 0.0

    def episode_return(self) -> float:
        """The last step's reward clipped to [-1, 1] if terminated, else 0
        (docs/architecture.md §2.6)."""
        return max(-1.0, min(1.0, self.final_reward)) if self.terminated else 0.0

    def success(self, threshold: float = 1.0) -> bool:
        return self.terminated and self.final_reward >= threshold

    @property
    def generated_tokens(self) -> int:
        return sum(len(t.completion_token_ids) for t in self.turns)

    def token_view(self) -> tuple[list[int], list[int], list[float]] | None:
        """The episode as one token sequence with a loss mask and log-probs.

        ``(ids [T], mask [T], logprobs [T])``: mask 1 on tokens the agent generated (their
        log-probs), 0 on prompt/observation tokens (log-prob 0.0). Possible when each turn's
        prompt extends the previous prompt plus completion (prefix-stable chat templates);
        otherwise None, and training uses the turns one by one.
        """
        ids: list[int] = []
        mask: list[int] = []
        lps: list[float] = []
        for turn in self.turns:
            prompt = turn.prompt_token_ids
            if prompt[: len(ids)] != ids:
                return None
            new = prompt[len(ids) :]
            ids += new + turn.completion_token_ids
            mask += [0] * len(new) + [1] * len(turn.completion_token_ids)
            lps += [0.0] * len(new) + list(turn.logprobs)
        return ids, mask, lps

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["return"] = self.episode_return()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """Inverse of :meth:`to_dict` (the derived ``return`` is recomputed, not read)."""
        fields = {k: v for k, v in data.items() if k not in ("return", "turns")}
        return cls(**fields, turns=[Turn(**t) for t in data.get("turns", [])])


EnvSource = Literal["designed", "pool"]
"""Where an environment came from: the designer wrote it, or it was drawn from the fixed pool
(``run.env_pool``); pool environments are played and trained on, never rewarded to the
designer."""


@dataclass(frozen=True)
class EnvSpec:
    """An accepted environment to evaluate."""

    env_id: str
    code: str
    skill: str
    hint: str | None
    tool_use: bool = False
    source: EnvSource = "designed"


@dataclass
class EnvEvaluation:
    """One environment's plays and the numbers the curriculum needs.

    Returns, win rates and regret come from the plays that did not fail on our side;
    ``failed_plays`` counts those that did (kept in ``trajectories``, measuring nothing),
    ``env_failed_plays`` the plays the environment itself broke (data: included, return 0) and
    ``resumed_plays`` those that went on in a fresh session after theirs ran past its wall limit
    waiting on the model (:attr:`Trajectory.resumed`; measured as any other).

    ``paired_regret`` is the regret taken per instance: the mean, over the ``paired_instances``
    instances (seeds) both groups played, of hinted minus unhinted return, floored at 0, with
    its 95% bootstrap interval over those instances (``paired_regret_interval``, ``[low,
    high]``); None without a shared instance (no hint, or a row stored before plays were
    paired), so older rows load as they were.
    """

    env_id: str
    skill: str
    hinted_returns: list[float]
    unhinted_returns: list[float]
    win_rate: float  # unhinted
    hinted_win_rate: float | None  # None without hinted plays (no hint): unknown, not 0
    regret: float
    failed_plays: int
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)
    source: EnvSource = "designed"
    env_failed_plays: int = 0
    paired_regret: float | None = None
    paired_regret_interval: list[float] | None = None
    paired_instances: int = 0
    resumed_plays: int = 0

    def summary(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "trajectories"}
