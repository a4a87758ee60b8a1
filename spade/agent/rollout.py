"""Many multi-turn episodes at once between one model and sandboxed environments.

Each step of the loop sends one batched request with the next turn of every live episode,
then steps every environment with the action from its reply. Jail calls block (a pipe to
another process), so they run in a thread pool sized to the parallelism: the steps of live
episodes overlap and the event loop stays free. Jailed sessions are pooled per environment
and reused across its episodes (``reset`` starts the next one), so a round pays a jail start
per environment and parallel slot, not per episode. Failures of the environment or the model
end that episode as data; a session whose wall limit ran out while its episode waited on the
model is ours, so the episode goes on in a fresh one (its moves replayed there).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from spade.agent.actions import ActionFormat, extract_action
from spade.agent.prompts import system_prompt
from spade.inference.base import (
    Backend,
    ChatRequest,
    Completion,
    InferenceFailureKind,
    SamplingParams,
)
from spade.records import FailureKind, Trajectory, Turn
from spade.sandbox.failures import EnvFailure
from spade.sandbox.policy import SandboxPolicy
from spade.sandbox.replies import REWARD_RANGE
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
    action_format: ActionFormat = "strict"  # see spade.agent.actions
    reward_range: tuple[float, float] = REWARD_RANGE  # checked on every step (the verifier's)


T = TypeVar("T")


@dataclass
class _Live:
    index: int
    job: EpisodeJob
    session: JailedSession
    traj: Trajectory
    started: float  # perf_counter when the episode began (before its reset)


@dataclass
class _Stepped:
    """What one ``step`` call gave, timed inside its thread (queueing is not counted)."""

    action: str
    result: tuple[str, float, bool, bool, dict[str, Any]] | None
    error: EnvFailure | None
    started_at: float  # epoch seconds
    seconds: float


class _Pools:
    """Started sessions per environment, waiting for their next episode, and the threads
    their blocking jail calls run in (one per live episode, so none waits for another)."""

    def __init__(
        self,
        policy: SandboxPolicy,
        max_turns: int,
        threads: int,
        reward_range: tuple[float, float] = REWARD_RANGE,
    ) -> None:
        self.policy = policy
        self.max_turns = max_turns
        self.reward_range = reward_range
        self.idle: dict[str, list[JailedSession]] = {}
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="spade-env")

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking jail call off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))

    async def acquire(self, job: EpisodeJob) -> JailedSession:
        idle = self.idle.get(job.env_id)
        while idle:
            session = idle.pop()
            if session.age_s < self.policy.limits.session_seconds / 2:
                return session
            session.close()  # near its wall limit: a fresh one would outlive the episode
        session = JailedSession(
            job.code,
            policy=self.policy,
            env_kwargs={"max_turns": self.max_turns},
            reward_range=self.reward_range,
        )
        try:
            await self.call(session.start)
        except EnvFailure:  # does not load: the caller records it; leave nothing behind
            session.close()
            raise
        return session

    def release(self, env_id: str, session: JailedSession) -> None:
        if session.alive:
            self.idle.setdefault(env_id, []).append(session)
        else:
            session.close()

    def close(self, busy: Sequence[JailedSession] = ()) -> None:
        """Close the idle sessions and ``busy`` ones (those of unfinished episodes)."""
        # Calls still running finish first (each is bounded by the jail's call timeout): a
        # session must not be closed under a call in another thread.
        self.executor.shutdown(wait=True, cancel_futures=True)
        for s in [*busy, *(s for sessions in self.idle.values() for s in sessions)]:
            s.close()
        self.idle.clear()


OnFinished = Callable[[int, Trajectory], None]
"""Called (in a worker thread, one call at a time) with a job's index and its trajectory as
soon as that episode ends; an exception it raises ends the run (e.g. a failed store write)."""


async def run_episodes(
    backend: Backend,
    jobs: Sequence[EpisodeJob],
    settings: RolloutSettings = RolloutSettings(),
    *,
    policy: SandboxPolicy,
    finished: Mapping[int, Trajectory] | None = None,
    on_finished: OnFinished | None = None,
) -> list[Trajectory]:
    """Play every job to its end; trajectories come back in job order.

    ``finished`` holds episodes already played (by job index, e.g. stored by an earlier attempt
    of the stage): they are returned as they are, not played again. ``on_finished`` sees every
    episode played here as it ends (so a caller can store it at once).

    Deterministic given the backend's answers: each episode's turns go in order, and episodes
    are started, advanced and released in job order whatever order their steps finish in. An
    episode's sampling seeds depend on its job index only, so playing the rest of the jobs after
    ``finished`` ones gives the episodes a whole run would.
    """
    pools = _Pools(policy, settings.max_turns, settings.max_parallel, settings.reward_range)
    done = dict(finished or {})
    pending = deque((i, job) for i, job in enumerate(jobs) if i not in done)
    live: list[_Live] = []
    results: list[Trajectory | None] = [done.get(i) for i in range(len(jobs))]

    async def end(index: int, traj: Trajectory) -> None:
        results[index] = traj
        if on_finished is not None:  # blocking I/O (a store write): off the event loop
            await asyncio.to_thread(on_finished, index, traj)

    try:
        while pending or live:
            starting: list[tuple[int, EpisodeJob]] = []
            while pending and len(live) + len(starting) < settings.max_parallel:
                starting.append(pending.popleft())
            # All starts finish before a host error (e.g. nsjail missing) is raised, so every
            # session that did start is in ``live`` and closed on the way out.
            begun = await asyncio.gather(
                *(_begin(i, job, pools) for i, job in starting), return_exceptions=True
            )
            unstarted = []
            for (index, _job), started in zip(starting, begun, strict=True):
                if isinstance(started, Trajectory):  # failed before the first turn
                    unstarted.append((index, started))
                elif isinstance(started, _Live):
                    live.append(started)
            if errors := [e for e in begun if isinstance(e, BaseException)]:
                raise errors[0]
            for index, traj in unstarted:  # after every started session is in ``live``
                await end(index, traj)
            if not live:
                continue
            requests = [_request(ep, settings, backend) for ep in live]
            completions = await backend.complete([r for r in requests if r is not None])
            answers = iter(completions)
            replies = [None if r is None else next(answers) for r in requests]
            # Every live episode's environment steps at once (each in its own thread).
            stepped = await asyncio.gather(
                *(
                    _step(ep, reply, pools, settings)
                    for ep, reply in zip(live, replies, strict=True)
                )
            )
            still, ended = [], []
            for ep, reply, step in zip(live, replies, stepped, strict=True):
                over = _context_full(ep) if reply is None else _advance(ep, reply, step, settings)
                if over:
                    ep.traj.wall_s = time.perf_counter() - ep.started
                    ep.traj.model = ep.traj.model or backend.model_name
                    pools.release(ep.job.env_id, ep.session)
                    ended.append(ep)
                else:
                    still.append(ep)
            live = still  # before the callbacks: a raising one must not close a released session
            for ep in ended:
                await end(ep.index, ep.traj)
    finally:
        pools.close([ep.session for ep in live])
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
        obs, _info = await pools.call(session.reset, job.seed, hint=job.hint)
        traj.tools = await pools.call(session.tools) if job.tool_use else None
    except EnvFailure as exc:
        pools.release(job.env_id, session)
        return _failed(traj, "env_failed", exc)
    traj.reset_s = time.perf_counter() - t0
    traj.messages = [
        {"role": "system", "content": system_prompt(job.tool_use, traj.tools)},
        {"role": "user", "content": obs},
    ]
    return _Live(index, job, session, traj, started=t0)


def _failed(traj: Trajectory, status: Any, exc: EnvFailure) -> Trajectory:
    # a session that expired while the episode waited on the model is our side's failure: the
    # play is left out of every measure and of training, not a 0 charged to the design
    expired = exc.failure.kind is FailureKind.SESSION_EXPIRED
    traj.status = "inference_failed" if expired else status
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


async def _step(
    ep: _Live, completion: Completion | None, pools: _Pools, settings: RolloutSettings
) -> _Stepped | None:
    """Step the episode's environment with the reply's action (None: nothing to step)."""
    if completion is None or completion.failure is not None:
        return None
    action = extract_action(
        completion.text, tool_use=ep.job.tool_use, action_format=settings.action_format
    )
    stepped = await pools.call(_timed_step, ep.session, action)
    if stepped.error is None or stepped.error.failure.kind is not FailureKind.SESSION_EXPIRED:
        return stepped
    return await _resumed(ep, stepped, pools)


async def _resumed(ep: _Live, expired: _Stepped, pools: _Pools) -> _Stepped:
    """The step ``expired`` tried, taken in a fresh session brought to where the expired one
    was: reset under the episode's seed and hint, and the episode's moves replayed, each answer
    checked against the one the episode saw. The jail's wall limit counts the time a session
    waits for the model, so under many parallel episodes on a slow host a play can outlive its
    session through no fault of either side; an environment is deterministic under its seed
    (the verifier's ``determinism`` check), so the play goes on where it was. When the fresh
    session does not start or answers differently, ``expired`` stands (the play is ours,
    left out)."""
    pools.release(ep.job.env_id, ep.session)  # dead: closed, not pooled
    job, traj = ep.job, ep.traj
    differs = "a fresh session's replay of its moves answered differently"
    try:
        ep.session = session = await pools.acquire(job)
        first, _info = await pools.call(session.reset, job.seed, hint=job.hint)
        if first != traj.messages[1]["content"]:
            return _unresumed(expired, differs)
        for turn in traj.turns:
            answer = await pools.call(session.step, turn.action)
            if answer[:4] != (turn.observation, turn.reward, turn.terminated, turn.truncated):
                return _unresumed(expired, differs)
    except EnvFailure as exc:  # the fresh session broke too: the expiry is what is recorded
        return _unresumed(expired, f"a fresh session failed: {exc.failure.reason}")
    traj.resumed += 1
    return await pools.call(_timed_step, session, expired.action)


def _unresumed(expired: _Stepped, why: str) -> _Stepped:
    assert expired.error is not None
    failure = expired.error.failure
    error = EnvFailure(
        dataclasses.replace(failure, reason=f"{failure.reason}; {why}"), fatal=expired.error.fatal
    )
    return dataclasses.replace(expired, error=error)


def _timed_step(session: JailedSession, action: str) -> _Stepped:
    started_at, t0 = time.time(), time.perf_counter()
    try:
        result = session.step(action)
    except EnvFailure as exc:  # the environment broke mid-episode: data, recorded by _advance
        return _Stepped(action, None, exc, started_at, time.perf_counter() - t0)
    return _Stepped(action, result, None, started_at, time.perf_counter() - t0)


def _advance(
    ep: _Live, completion: Completion, step: _Stepped | None, settings: RolloutSettings
) -> bool:
    """Apply one reply and its step to the episode; True when the episode is over."""
    traj = ep.traj
    if completion.failure is not None:  # inference_failed: our side, left out of every measure
        kind = completion.failure.kind
        traj.status = (
            "context_limit" if kind is InferenceFailureKind.CONTEXT_LENGTH else "inference_failed"
        )
        traj.failure = {"kind": str(kind), "reason": completion.failure.reason}
        return True
    traj.model = completion.model
    assert step is not None  # a reply without failure always has its step
    if step.error is not None:  # the environment broke mid-episode: data, return 0
        # the reply that broke it is the play's last turn (no observation, no reward): the
        # play counts 0 in the win rate and regret, so the reply is trained on with that return;
        # a session that expired is ours (_failed), and no turn is kept to train on
        if step.error.failure.kind is not FailureKind.SESSION_EXPIRED:
            traj.turns.append(_turn(completion, step, "", 0.0, False, False))
            traj.messages.append({"role": "assistant", "content": completion.text})
        _failed(traj, "env_failed", step.error)
        return True
    assert step.result is not None
    obs, reward, terminated, truncated, _ = step.result
    traj.turns.append(_turn(completion, step, obs, reward, terminated, truncated))
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


def _turn(
    completion: Completion,
    step: _Stepped,
    obs: str,
    reward: float,
    terminated: bool,
    truncated: bool,
) -> Turn:
    """One turn of the episode: the reply, the action stepped and what the step answered."""
    return Turn(
        prompt_token_ids=completion.prompt_token_ids,
        completion_token_ids=completion.token_ids,
        logprobs=completion.logprobs,
        text=completion.text,
        action=step.action,
        observation=obs,
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        finish_reason=completion.finish_reason,
        generate_s=completion.latency_s,
        step_s=step.seconds,
        step_started_at=step.started_at,
    )
