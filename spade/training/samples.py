"""Training samples: what GRPO trains on, built from plays and designs, batched and collated.

A :class:`TrainSample` is one token sequence (prompt, observations and the model's own tokens)
with a loss mask on the model's own tokens, the log-probs the sampler reported for them, one
scalar reward and the *group* its reward is compared within (an environment's plays for the
agent, a skill's design attempts for the designer).

Alignment. Everything in a :class:`TrainSample` is indexed by **token**: ``loss_mask[t]`` says
whether token ``t`` is trained on and ``behaviour_logprobs[t]`` is ``log p(token t | tokens <
t)`` (0.0 where the mask is 0). A causal LM predicts token ``t`` at position ``t - 1``, so
:func:`collate` shifts by one: in a collated batch everything per-token is indexed by
**position**, ``target_ids[b, t] = input_ids[b, t + 1]``, ``loss_mask[b, t] =
sample.loss_mask[t + 1]``, ``behaviour_logprobs[b, t] = sample.behaviour_logprobs[t + 1]``, and
the model's ``logits[b, t]`` score ``target_ids[b, t]``. Token 0 is predicted by nothing, so it
can never be trained on (a sample whose ``loss_mask[0]`` is 1 is refused), and the last position
predicts nothing (its mask is always 0).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from spade.training.advantages import get_advantage_fn, group_advantages

if TYPE_CHECKING:
    from spade.records import DesignAttempt, Trajectory

__all__ = [
    "TrainSample",
    "assign_advantages",
    "collate",
    "flat_group_share",
    "micro_batches",
    "missing_token_ids",
    "samples_from_design_attempts",
    "samples_from_trajectories",
]

log = logging.getLogger(__name__)
Batch = dict[str, torch.Tensor]


@dataclass
class TrainSample:
    """One sequence to train on; every list has one entry per token (length ``T``).

    Attributes:
        input_ids: ``[T]`` token ids, prompt and completion(s).
        loss_mask: ``[T]`` 1 on the model's own tokens (trained on), 0 elsewhere; ``[0]`` is 0.
        behaviour_logprobs: ``[T]`` the sampler's log-prob of each token (0.0 where masked).
        reward: the episode return or the designer reward.
        group: rewards are compared within a group (env id for plays, skill for designs).
        advantage: filled by :func:`assign_advantages`; None until then.
        unit: the rollout the sample is a part of (a play, a design answer): the samples of one
            unit share its reward, and a group's mean and std count each unit once, however
            many samples it was cut into (a play's turns on the per-turn path, a design's
            follow-ups). Empty: the sample is a unit of its own.
    """

    input_ids: list[int]
    loss_mask: list[int]
    behaviour_logprobs: list[float]
    reward: float
    group: str
    advantage: float | None = None
    unit: str = ""

    def __post_init__(self) -> None:
        n = len(self.input_ids)
        if len(self.loss_mask) != n or len(self.behaviour_logprobs) != n:
            raise ValueError(
                f"sample of group {self.group!r}: {n} ids, {len(self.loss_mask)} mask entries"
                f" and {len(self.behaviour_logprobs)} log-probs (must all be equal)"
            )
        if n < 2:
            raise ValueError(f"sample of group {self.group!r} needs at least 2 tokens, has {n}")
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError(f"sample of group {self.group!r}: loss_mask must be 0/1")
        if self.loss_mask[0]:  # nothing predicts the first token (see the module docstring)
            raise ValueError(f"sample of group {self.group!r}: the first token cannot be trained")
        if not math.isfinite(self.reward):
            raise ValueError(f"sample of group {self.group!r}: reward {self.reward} not finite")

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def trained_tokens(self) -> int:
        """How many tokens the loss is taken on."""
        return sum(self.loss_mask)


# ------------------------------------------------------------------------------------ builders


def samples_from_trajectories(
    trajectories: Iterable[Trajectory], *, only_unhinted: bool = True
) -> list[TrainSample]:
    """Agent samples: one per episode (``Trajectory.token_view()``), else one per turn.

    Hinted plays are measured, never trained on (docs/architecture.md §2.4): with ``only_unhinted``
    (the default) they are skipped. ``reward`` is the episode return and ``group`` the env id, so
    advantages compare the plays of one environment. When the chat template is not prefix-stable
    (``token_view()`` is None) every turn becomes its own sample (its prompt masked) carrying
    the episode's return. Episodes and turns without generated tokens are skipped, and so are
    plays that failed on our side (``Trajectory.failed``: an outage's return 0 is no signal).
    """
    out: list[TrainSample] = []
    for play, traj in enumerate(trajectories):
        if (traj.hinted and only_unhinted) or traj.failed:
            continue
        reward = traj.episode_return()
        unit = f"play{play}"  # its turns' samples are one play to the advantage
        view = traj.token_view()
        if view is not None:
            ids, mask, lps = view
            if sum(mask):
                where = f"trajectory {traj.env_id}"
                out.append(_sample(ids, mask, lps, reward, traj.env_id, where, unit))
            continue
        for i, turn in enumerate(traj.turns):
            if not turn.completion_token_ids:
                continue
            prompt, tokens, lps = turn.prompt_token_ids, turn.completion_token_ids, turn.logprobs
            where = f"{traj.env_id} turn {i}"
            out.append(completion_sample(prompt, tokens, lps, reward, traj.env_id, where, unit))
    return out


def samples_from_design_attempts(
    attempts: Sequence[DesignAttempt], rewards: Sequence[float]
) -> list[TrainSample]:
    """Designer samples: prompt + completion ids, trained on the completion, grouped by skill
    (a scaffolded design gives one sample per body it sampled, a splice one per follow-up, each
    with the design's reward: one unit, :attr:`TrainSample.unit`, so a design cut into more
    parts does not weigh more in its skill's mean).

    ``rewards[i]`` is the reward of the answer ``attempts[i]`` trains on (its first answer:
    :func:`spade.scoring.outcomes.score`'s ``trained_raw``), before any centring (the
    advantages centre it once, over the trained units); rejected designs are data too.
    Attempts that failed on our side (:attr:`DesignAttempt.failed`) must be left out by the
    caller, with their rewards, and raise here. Attempts without completion tokens (a backend
    that returns no token ids) cannot be trained on and are skipped, with a warning counting
    them.
    """
    if len(attempts) != len(rewards):
        raise ValueError(f"{len(attempts)} design attempts but {len(rewards)} rewards")
    out: list[TrainSample] = []
    skipped = 0
    for n, (attempt, reward) in enumerate(zip(attempts, rewards, strict=True)):
        if attempt.failed:  # its reward would be an outage's: the caller's pairing is wrong
            raise ValueError(f"design attempt {attempt.slot}.{attempt.attempt} failed: no data")
        where = f"design attempt {attempt.slot}.{attempt.attempt}"
        parts = attempt.sampled_parts()
        if not any(part["token_ids"] for part in parts):
            skipped += 1
            continue
        for part in parts:  # a scaffolded design: a sample per body, each with its own prompt
            prompt, tokens = list(part["prompt_token_ids"]), list(part["token_ids"])
            if not tokens:  # a body that stopped at once: nothing sampled to train
                continue
            if not prompt:
                raise ValueError(f"{where} has completion tokens but no prompt token ids")
            lps = part["logprobs"]
            unit = f"design{n}"  # its parts are one design to the advantage
            out.append(completion_sample(prompt, tokens, lps, reward, attempt.skill, where, unit))
    if skipped:
        log.warning("%d of %d design attempts have no completion tokens", skipped, len(attempts))
    return out


def completion_sample(
    prompt_ids: Sequence[int],
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    reward: float,
    group: str,
    where: str = "completion",
    unit: str = "",
) -> TrainSample:
    """One sampled completion as a sample: the prompt's tokens masked out (log-prob 0), the
    completion's trained with the sampler's log-probs (one per completion token); ``unit``:
    the rollout it is part of (:attr:`TrainSample.unit`)."""
    ids = [*prompt_ids, *token_ids]
    mask = [0] * len(prompt_ids) + [1] * len(token_ids)
    lps = [0.0] * len(prompt_ids) + list(logprobs)  # _sample makes them floats
    return _sample(ids, mask, lps, reward, group, where, unit)


def _sample(
    ids: list[int],
    mask: list[int],
    lps: list[float],
    reward: float,
    group: str,
    where: str,
    unit: str = "",
) -> TrainSample:
    if len(lps) != len(ids):  # the sampler returned too few or too many log-probs
        raise ValueError(f"{where}: {len(ids)} tokens but {len(lps)} log-probs")
    floats = [float(x) for x in lps]
    return TrainSample(list(ids), list(mask), floats, float(reward), group, unit=unit)


# ---------------------------------------------------------------------------------- advantages


def assign_advantages(
    samples: Sequence[TrainSample], fn_name: str | None = None, *, scale_by_std: bool = True
) -> Sequence[TrainSample]:
    """Fill each sample's ``advantage`` from the rewards of its group; returns ``samples``.

    The estimator sees one reward per *unit* (:attr:`TrainSample.unit`: a play, a design
    answer), not per sample: a play cut into four turn samples weighs as much in its group's
    mean and std as a play kept whole, and every sample of a unit gets the unit's advantage.
    ``fn_name`` names an estimator of :data:`spade.training.advantages.ADVANTAGES`
    (``"zscore"``, ``"centred"``) and then decides alone; None uses ``group_advantages`` with
    ``scale_by_std`` (``TrainingConfig.advantage_std`` for the agent; the designer's rewards are
    centred per skill, no std). Advantages must be computed over the *whole* batch, before it is
    split between data-parallel ranks. ValueError when the samples of one unit disagree on
    their reward.
    """
    if not samples:
        return samples
    unit_index: dict[tuple[str, str], int] = {}
    which: list[int] = []
    rewards: list[float] = []
    groups: list[str] = []
    for i, sample in enumerate(samples):
        key = (sample.group, sample.unit or f"#sample{i}")
        j = unit_index.setdefault(key, len(rewards))
        if j == len(rewards):
            rewards.append(sample.reward)
            groups.append(sample.group)
        elif rewards[j] != sample.reward:
            raise ValueError(
                f"unit {sample.unit!r} of group {sample.group!r} has rewards {rewards[j]} and"
                f" {sample.reward}: the samples of one rollout share its reward"
            )
        which.append(j)
    index: dict[str, int] = {}
    group_ids = torch.tensor([index.setdefault(g, len(index)) for g in groups])
    reward_t = torch.tensor(rewards, dtype=torch.float64)
    if fn_name is not None:
        adv = get_advantage_fn(fn_name)(reward_t, group_ids)
    else:
        adv = group_advantages(reward_t, group_ids, scale_by_std=scale_by_std)
    per_unit = adv.tolist()
    for sample, j in zip(samples, which, strict=True):
        sample.advantage = float(per_unit[j])
    return samples


def missing_token_ids(
    trajectories: Iterable[Trajectory] = (), attempts: Iterable[DesignAttempt] = ()
) -> int:
    """What the builders above drop for want of token ids: unhinted, not failed agent turns
    that wrote text but carry no completion ids, and design attempts (not failed) that wrote
    an answer but carry no token ids in any part (a server that returns no ids, with no
    tokenizer to re-derive them). An empty reply is not counted: nothing was sampled."""
    turns = sum(
        1
        for t in trajectories
        if not t.hinted and not t.failed
        for turn in t.turns
        if turn.text and not turn.completion_token_ids
    )
    designs = sum(
        1
        for a in attempts
        if not a.failed
        and a.completion
        and not any(part["token_ids"] for part in a.sampled_parts())
    )
    return turns + designs


def flat_group_share(samples: Sequence[TrainSample]) -> float:
    """The share of ``samples``' groups that give GRPO no gradient: every sample's advantage
    exactly 0 (rewards all equal, or a group of one; see :mod:`spade.training.advantages`).
    0.0 for no samples. Advantages must be assigned."""
    flat: dict[str, bool] = {}
    for sample in samples:
        if sample.advantage is None:
            raise ValueError(f"sample of group {sample.group!r} has no advantage assigned")
        flat[sample.group] = flat.get(sample.group, True) and sample.advantage == 0.0
    return sum(flat.values()) / len(flat) if flat else 0.0


# ---------------------------------------------------------------------------------- batching


def micro_batches(samples: Sequence[TrainSample], token_budget: int) -> list[list[int]]:
    """Indices of ``samples`` in micro-batches of at most ``token_budget`` padded tokens.

    A micro-batch is padded to its longest sample, so it costs ``len(longest) * count`` tokens.
    Samples are packed longest first (ties in input order): each micro-batch takes the longest
    remaining sample and then the following ones while the padded cost stays within the budget,
    which keeps padding low because neighbours have similar lengths. A sample longer than the
    budget on its own cannot be split (the loss needs the whole sequence in one forward), so it
    gets a micro-batch to itself and exceeds the budget; nothing is dropped. Deterministic.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    order = sorted(range(len(samples)), key=lambda i: (-len(samples[i]), i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = len(samples[current[0]]) if current else len(samples[i])
        if current and longest * (len(current) + 1) > token_budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def collate(samples: Sequence[TrainSample], pad_id: int) -> Batch:
    """Right-padded tensors of a micro-batch, per-token ones shifted to positions.

    Returns (``B`` samples, ``T`` the longest length):

    - ``input_ids`` ``[B, T]`` int64, ``pad_id`` after each sample's end;
    - ``attention_mask`` ``[B, T]`` int64, 1 on real tokens;
    - ``target_ids`` ``[B, T]`` int64, ``input_ids[b, t + 1]`` (``pad_id`` at the last position
      of each sample and beyond): the token position ``t`` predicts;
    - ``loss_mask`` ``[B, T]`` float32, ``sample.loss_mask[t + 1]``: 1 where position ``t``'s
      prediction is trained on, 0 on prompt/observation targets, at the end and on padding;
    - ``behaviour_logprobs`` ``[B, T]`` float32, ``sample.behaviour_logprobs[t + 1]`` (0.0 where
      the mask is 0);
    - ``advantages`` ``[B]`` float32 (every sample needs one: see :func:`assign_advantages`).

    Right padding keeps each real token's position id equal to its index, so a causal model
    sees the same positions as when the sample was generated.
    """
    if not samples:
        raise ValueError("cannot collate an empty micro-batch")
    missing = [i for i, s in enumerate(samples) if s.advantage is None]
    if missing:
        raise ValueError(f"samples {missing[:5]} have no advantage: call assign_advantages first")
    b, t = len(samples), max(len(s) for s in samples)
    input_ids = torch.full((b, t), pad_id, dtype=torch.long)
    target_ids = torch.full((b, t), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((b, t), dtype=torch.long)
    loss_mask = torch.zeros((b, t), dtype=torch.float32)
    behaviour = torch.zeros((b, t), dtype=torch.float32)
    for row, s in enumerate(samples):
        n = len(s)
        input_ids[row, :n] = torch.tensor(s.input_ids)
        target_ids[row, : n - 1] = input_ids[row, 1:n]
        attention_mask[row, :n] = 1
        loss_mask[row, : n - 1] = torch.tensor(s.loss_mask[1:], dtype=torch.float32)
        behaviour[row, : n - 1] = torch.tensor(s.behaviour_logprobs[1:], dtype=torch.float32)
    # the sampler's value at a masked token means nothing (it may even be -inf)
    behaviour = torch.where(loss_mask > 0, behaviour, torch.zeros_like(behaviour))
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "target_ids": target_ids,
        "loss_mask": loss_mask,
        "behaviour_logprobs": behaviour,
        "advantages": torch.tensor([s.advantage for s in samples], dtype=torch.float32),
    }
