"""Many multi-turn episodes at once between one model and sandboxed environments.

Each step of the loop sends one batched request with the next turn of every live episode,
then steps every environment with the action from its reply. Jailed sessions are pooled per
environment and reused across its episodes (``reset`` starts the next one), so a round pays a
jail start per environment and parallel slot, not per episode. Failures of the environment
or the model end that episode as data.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spade.agent.actions import extract_action
from spade.agent.prompts import system_prompt
from spade.agent.trajectory import Trajectory, Turn
from spade.inference.base import (
    Backend,
    ChatRequest,
    Completion,
    InferenceFailureKind,
    SamplingParams,
)
from spade.sandbox.failures import EnvFailure
from spade.sandbox.policy import SandboxPolicy, load_policy
from spade.sandbox.session import JailedSession


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to play: which environment, which instance, with or without a hint."""

    env_id: str
    code: str
    seed: int
    hint: str | None = None
    tool_use: bool = False


@dataclass(frozen=True)
class RolloutSettings:
    max_turns: int = 25
    temperature: float = 1.0
    max_tokens_per_turn: int = 1024
    max_context_tokens: int = 8192
    max_parallel: int = 64  # live episodes (and so jailed sessions) at once
    seed: int = 0  # base of the per-turn sampling seeds
    # Per-request seeds make every turn reproducible; vLLM batches them freely, but the
    # in-process backend must then generate each request alone, so they are opt-in.
    seeded_sampling: bool = False
    model: str | None = None  # adapter / model name to request (None: backend default)


@dataclass
class _Live:
    index: int
    job: EpisodeJob
    session: JailedSession
    traj: Trajectory
    started: float = field(default_factory=time.perf_counter)


class _Pools:
    """Started sessions per environment, waiting for their next episode."""

    def __init__(self, policy: SandboxPolicy, max_turns: int) -> None:
        self.policy = policy
        self.max_turns = max_turns
        self.idle: dict[str, list[JailedSession]] = {}

    async def acquire(self, job: EpisodeJob) -> JailedSession:
        idle = self.idle.get(job.env_id)
        if idle:
            return idle.pop()
        session = JailedSession(
            job.code, policy=self.policy, env_kwargs={"max_turns": self.max_turns}
        )
        try:
            await asyncio.to_thread(session.start)
        except EnvFailure:  # does not load: the caller records it; leave nothing behind
            session.close()
            raise
        return session

    def release(self, env_id: str, session: JailedSession) -> None:
        if session.alive:
            self.idle.setdefault(env_id, []).append(session)
        else:
            session.close()

    def close(self) -> None:
        for sessions in self.idle.values():
            for s in sessions:
                s.close()
        self.idle.clear()


async def run_episodes(
    backend: Backend,
    jobs: Sequence[EpisodeJob],
    settings: RolloutSettings = RolloutSettings(),
    *,
    policy: SandboxPolicy | None = None,
) -> list[Trajectory]:
    """Play every job to its end; trajectories come back in job order."""
    pools = _Pools(policy or load_policy(), settings.max_turns)
    pending = deque(enumerate(jobs))
    live: list[_Live] = []
    results: list[Trajectory | None] = [None] * len(jobs)
    try:
        while pending or live:
            starting: list[tuple[int, EpisodeJob]] = []
            while pending and len(live) + len(starting) < settings.max_parallel:
                starting.append(pending.popleft())
            begun = await asyncio.gather(*(_begin(i, job, pools) for i, job in starting))
            for (index, _job), started in zip(starting, begun, strict=True):
                if isinstance(started, Trajectory):  # failed before the first turn
                    results[index] = started
                else:
                    live.append(started)
            if not live:
                continue
            requests = [_request(ep, settings, backend) for ep in live]
            completions = await backend.complete([r for r in requests if r is not None])
            answers = iter(completions)
            still = []
            for ep, request in zip(live, requests, strict=True):
                done = (
                    _context_full(ep) if request is None else _advance(ep, next(answers), settings)
                )
                if done:
                    ep.traj.wall_s = time.perf_counter() - ep.started
                    ep.traj.model = ep.traj.model or backend.model_name
                    results[ep.index] = ep.traj
                    pools.release(ep.job.env_id, ep.session)
                else:
                    still.append(ep)
            live = still
    finally:
        for ep in live:
            ep.session.close()
        pools.close()
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


async def _begin(index: int, job: EpisodeJob, pools: _Pools) -> _Live | Trajectory:
    traj = Trajectory(env_id=job.env_id, seed=job.seed, hinted=job.hint is not None, hint=job.hint)
    t0 = time.perf_counter()
    try:
        session = await pools.acquire(job)
    except EnvFailure as exc:
        return _failed(traj, "env_failed", exc)
    try:
        obs, _info = session.reset(job.seed, hint=job.hint)
        traj.tools = session.tools() if job.tool_use else None
    except EnvFailure as exc:
        pools.release(job.env_id, session)
        return _failed(traj, "env_failed", exc)
    traj.reset_s = time.perf_counter() - t0
    traj.messages = [
        {"role": "system", "content": system_prompt(job.tool_use, traj.tools)},
        {"role": "user", "content": obs},
    ]
    return _Live(index, job, session, traj)


def _failed(traj: Trajectory, status: Any, exc: EnvFailure) -> Trajectory:
    traj.status = status
    traj.failure = {"kind": str(exc.failure.kind), "reason": exc.failure.reason}
    return traj


def _request(ep: _Live, settings: RolloutSettings, backend: Backend) -> ChatRequest | None:
    """The next turn's request, or None when the conversation no longer fits the context."""
    used = backend.count_tokens(ep.traj.messages, ep.traj.tools)
    if used is not None and used + settings.max_tokens_per_turn > settings.max_context_tokens:
        return None
    turn = len(ep.traj.turns)
    seed = (settings.seed * 1_000_003 + ep.index * 1009 + turn) % (2**31)
    params = SamplingParams(
        max_tokens=settings.max_tokens_per_turn,
        temperature=settings.temperature,
        seed=seed if settings.seeded_sampling else None,
    )
    return ChatRequest(
        messages=list(ep.traj.messages), params=params, tools=ep.traj.tools, model=settings.model
    )


def _context_full(ep: _Live) -> bool:
    ep.traj.status = "context_limit"
    return True


def _advance(ep: _Live, completion: Completion, settings: RolloutSettings) -> bool:
    """Apply one reply to its episode; True when the episode is over."""
    traj = ep.traj
    if completion.failure is not None:
        kind = completion.failure.kind
        traj.status = (
            "context_limit" if kind is InferenceFailureKind.CONTEXT_LENGTH else "inference_failed"
        )
        traj.failure = {"kind": str(kind), "reason": completion.failure.reason}
        return True
    traj.model = completion.model
    action = extract_action(completion.text, tool_use=ep.job.tool_use)
    t0 = time.perf_counter()
    try:
        obs, reward, terminated, truncated, _ = ep.session.step(action)
    except EnvFailure as exc:  # the environment broke mid-episode: data, return 0
        _failed(traj, "env_failed", exc)
        return True
    traj.turns.append(
        Turn(
            prompt_token_ids=completion.prompt_token_ids,
            completion_token_ids=completion.token_ids,
            logprobs=completion.logprobs,
            text=completion.text,
            action=action,
            observation=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            finish_reason=completion.finish_reason,
            generate_s=completion.latency_s,
            step_s=time.perf_counter() - t0,
        )
    )
    traj.messages += [
        {"role": "assistant", "content": completion.text},
        {"role": "user", "content": obs},
    ]
    if terminated or truncated:
        traj.status = "terminated" if terminated else "truncated"
        return True
    if len(traj.turns) >= settings.max_turns:
        traj.status = "turn_limit"
        return True
    return False
