"""Batched multi-turn rollouts against real jails and the OpenAI stand-in."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from spade.agent import EpisodeJob, RolloutSettings, run_episodes
from spade.config import InferenceConfig
from spade.inference.openai import OpenAIBackend
from spade.sandbox import session as session_mod
from spade.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.sandbox

EXAMPLES = Path(__file__).resolve().parents[2] / "spade" / "envs" / "examples"
CODE_BREAKER = (EXAMPLES / "code_breaker.py").read_text()
ORDERS = (EXAMPLES / "order_fulfillment.py").read_text()

FLAKY = """
class FlakyEnv:
    def reset(self, seed=None):
        self.n = 0
        return "go", {}
    def step(self, action):
        self.n += 1
        if self.n == 2:
            raise RuntimeError("broke on turn 2")
        return "more", 0.0, False, False, {}
"""

# Each step takes a while inside the jail (a lower bound the recorded step times must show).
SLOW = """
import time


class SlowEnv:
    def reset(self, seed=None):
        self.n = 0
        return f"instance {seed}", {}

    def step(self, action):
        self.n += 1
        time.sleep(0.3)
        return f"step {self.n} of {action}", 1.0, self.n >= 2, False, {}
"""


def backend(server: FakeOpenAIServer, **kw) -> OpenAIBackend:
    cfg = InferenceConfig(
        backend="openai", base_url=server.url, max_retries=0, request_timeout_s=5, **kw
    )
    return OpenAIBackend(cfg, server.model)


def play(server, policy, jobs, **settings):
    async def go():
        b = backend(server)
        try:
            return await run_episodes(b, jobs, RolloutSettings(**settings), policy=policy)
        finally:
            await b.aclose()

    return asyncio.run(go())


@pytest.fixture
def session_starts(monkeypatch) -> list[int]:
    """One entry per jailed session started while the test runs."""
    starts: list[int] = []
    real_start = session_mod.JailedSession.start

    def counting_start(self):
        starts.append(1)
        return real_start(self)

    monkeypatch.setattr(session_mod.JailedSession, "start", counting_start)
    return starts


def test_episodes_batch_together_and_reuse_sessions(session_starts, policy):
    starts = session_starts
    with FakeOpenAIServer(script=lambda r: "\\boxed{0123}", latency_s=0.05) as server:
        jobs = [EpisodeJob("cb", CODE_BREAKER, seed=i) for i in range(6)]
        trajs = play(server, policy, jobs, max_parallel=2)
    assert [t.seed for t in trajs] == list(range(6))
    assert all(t.status == "terminated" and len(t.turns) == 10 for t in trajs)  # 10 guesses
    assert len(starts) == 2  # two parallel slots, each session reset for the next episode
    assert server.max_in_flight == 2
    for t in trajs:  # timings: present, non-negative, and the parts fit in the whole
        assert t.reset_s > 0 and t.wall_s > 0
        assert all(turn.generate_s > 0 and turn.step_s > 0 for turn in t.turns)
        starts_at = [turn.step_started_at for turn in t.turns]
        assert starts_at[0] > 0 and starts_at == sorted(set(starts_at))  # one after another
        parts = t.reset_s + sum(turn.generate_s + turn.step_s for turn in t.turns)
        assert parts <= t.wall_s


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of ``[start, end]`` intervals that share a moment."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = now = 0
    for _, change in events:  # at a tie an end sorts first: touching is not overlapping
        now += change
        most = max(most, now)
    return most


def test_steps_of_live_episodes_run_at_the_same_time(session_starts, policy, monkeypatch):
    """The three live episodes' steps are in flight at once. No timing: each step (the host's
    blocking call into its jail) first waits at a barrier for three parties, which only three
    steps running at the same time can pass; one at a time (or fewer threads than live
    episodes) breaks the barrier (its timeout is a liveness bound, not a measure)."""
    starts = session_starts
    together = threading.Barrier(3, timeout=60)
    real_step = session_mod.JailedSession.step

    def step_with_the_others(self, action):
        together.wait()  # BrokenBarrierError unless three steps are in flight
        return real_step(self, action)

    monkeypatch.setattr(session_mod.JailedSession, "step", step_with_the_others)
    with FakeOpenAIServer(script=lambda r: "\\boxed{7}") as server:
        jobs = [EpisodeJob("slow", SLOW, seed=i) for i in range(6)]
        trajs = play(server, policy, jobs, max_parallel=3)
    assert len(starts) == 3  # sessions are still reused across episodes
    assert [t.seed for t in trajs] == list(range(6))
    for t in trajs:  # each episode's own turns stay in order, every step answered
        assert t.status == "terminated" and [turn.observation for turn in t.turns] == [
            "step 1 of \\boxed{7}",
            "step 2 of \\boxed{7}",
        ]
        assert t.messages[1]["content"] == f"instance {t.seed}"
    assert not together.broken
    steps = [
        (turn.step_started_at, turn.step_started_at + turn.step_s)
        for t in trajs
        for turn in t.turns
    ]
    assert all(b - a >= 0.3 for a, b in steps)  # the sleep happened inside each step
    # the recorded intervals agree: each group of three shares the moment the barrier opened
    assert most_at_once(steps) == 3


def test_env_failure_mid_episode_is_data_and_others_go_on(policy):
    with FakeOpenAIServer(script=lambda r: "\\boxed{0123}") as server:
        jobs = [
            EpisodeJob("flaky", FLAKY, 0),
            EpisodeJob("cb", CODE_BREAKER, 1),
            EpisodeJob("bad", "class (:", 2),
        ]
        flaky, cb, bad = play(server, policy, jobs, max_turns=5)
    assert flaky.status == "env_failed" and flaky.failure["kind"] == "crash"
    assert len(flaky.turns) == 2 and flaky.turns[-1].observation == ""  # the reply that broke it
    assert flaky.episode_return() == 0.0
    assert bad.status == "env_failed" and bad.failure["kind"] == "syntax"
    assert cb.status == "terminated" and len(cb.turns) == 5  # max_turns reaches the env too


def test_the_reply_that_crashed_the_env_is_recorded_and_trained_on(policy):
    """An environment that breaks on the first step: the play counts 0 in the win rate and
    the regret, and the reply that broke it is its one turn, a training sample with that
    return (before, the reply was dropped: a crash on the first step left no sample at all,
    a later one left the crashing reply unpenalised)."""
    from spade.training.samples import samples_from_trajectories

    first = FLAKY.replace("FlakyEnv", "FirstEnv").replace("if self.n == 2", "if self.n == 1")
    with FakeOpenAIServer(script=lambda r: "\\boxed{9}") as server:
        (t,) = play(server, policy, [EpisodeJob("first", first, 0)], max_turns=5)
    assert t.status == "env_failed" and t.failure["kind"] == "crash"
    (turn,) = t.turns
    assert turn.text == "\\boxed{9}" and turn.completion_token_ids and turn.reward == 0.0
    assert t.messages[-1] == {"role": "assistant", "content": "\\boxed{9}"}
    (sample,) = samples_from_trajectories([t])
    assert sample.reward == 0.0 and sample.trained_tokens == len(turn.completion_token_ids)


def test_an_env_that_never_ends_is_cut_at_the_turn_limit(policy):
    endless = FLAKY.replace("FlakyEnv", "EndlessEnv").replace("if self.n == 2", "if self.n == -1")
    with FakeOpenAIServer(script=lambda r: "\\boxed{1}") as server:
        (t,) = play(server, policy, [EpisodeJob("endless", endless, 0)], max_turns=4)
    assert t.status == "turn_limit" and len(t.turns) == 4 and t.episode_return() == 0.0


def test_inference_failure_and_context_limit_end_the_episode(policy):
    with FakeOpenAIServer(script=lambda r: "\\boxed{0123}", faults=["500"]) as server:
        (t,) = play(server, policy, [EpisodeJob("cb", CODE_BREAKER, 0)])
    assert t.status == "inference_failed" and t.failure["kind"] == "server_error"
    with FakeOpenAIServer(
        script=lambda r: "\\boxed{0123} " + "pad " * 50, max_context=1200
    ) as server:
        (t,) = play(server, policy, [EpisodeJob("cb", CODE_BREAKER, 0)], max_tokens_per_turn=100)
    assert t.status == "context_limit" and 0 < len(t.turns) < 10


def test_tool_use_episode_sends_tool_schemas_and_hint(policy):
    with FakeOpenAIServer(script=lambda r: "<answer>0</answer>") as server:
        (t,) = play(
            server,
            policy,
            [EpisodeJob("orders", ORDERS, 3, hint="check stock first", tool_use=True)],
        )
        chats = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
    assert t.status == "terminated" and t.hinted and t.tools
    assert {tool["function"]["name"] for tool in chats[0]["tools"]} >= {"get_order", "ship_order"}
    assert chats[0]["messages"][1]["content"].endswith("HINT: check stock first")
    assert (
        "- ship_order(" in chats[0]["messages"][0]["content"]
    )  # listed for templates without tools


@pytest.mark.parametrize("action_format", ["strict", "lenient"])
def test_action_format_decides_whether_a_plain_move_is_played(action_format, policy):
    """A reply that names a move without \\boxed{}: strict sends it whole (the environment's
    format message), lenient plays its last line."""
    with FakeOpenAIServer(script=lambda r: "My guess:\n0123") as server:
        (t,) = play(
            server,
            policy,
            [EpisodeJob("cb", CODE_BREAKER, 0)],
            max_turns=1,
            action_format=action_format,
        )
    (turn,) = t.turns
    assert turn.text == "My guess:\n0123"  # what the model wrote, whatever is played
    if action_format == "strict":
        assert turn.action == turn.text and "\\boxed" in turn.observation
    else:
        assert turn.action == "\\boxed{0123}" and "\\boxed" not in turn.observation


def _play_with(server, policy, jobs, **kwargs):
    async def go():
        b = backend(server)
        try:
            return await run_episodes(
                b, jobs, RolloutSettings(max_parallel=3), policy=policy, **kwargs
            )
        finally:
            await b.aclose()

    return asyncio.run(go())


def test_finished_episodes_are_not_played_again_and_the_callback_sees_the_rest(policy):
    jobs = [EpisodeJob("cb", CODE_BREAKER, seed=i) for i in range(3)]
    with FakeOpenAIServer(script=lambda r: "\\boxed{0123}") as server:
        whole = _play_with(server, policy, jobs)
        before = len(server.chat_requests)
        seen: list[tuple[int, int]] = []
        again = _play_with(
            server,
            policy,
            jobs,
            finished={0: whole[0], 2: whole[2]},
            on_finished=lambda i, t: seen.append((i, t.seed)),
        )
        assert len(server.chat_requests) - before == 10  # one episode of ten guesses
    assert seen == [(1, 1)]
    assert again[0] is whole[0] and again[2] is whole[2]
    assert [turn.observation for turn in again[1].turns] == [
        turn.observation for turn in whole[1].turns
    ]


def test_a_raising_callback_ends_the_run_and_closes_every_session(monkeypatch, policy):
    """A failed store write (the callback raising) ends the run; no started jail is left,
    also when the episode that ended first never got a session (it did not load)."""
    opened: list[session_mod.JailedSession] = []
    closed: set[int] = set()
    real_start, real_close = session_mod.JailedSession.start, session_mod.JailedSession.close

    def start(self):
        opened.append(self)
        return real_start(self)

    def close(self):
        closed.add(id(self))
        return real_close(self)

    monkeypatch.setattr(session_mod.JailedSession, "start", start)
    monkeypatch.setattr(session_mod.JailedSession, "close", close)

    def store_down(index, traj):
        raise RuntimeError("store down")

    jobs = [EpisodeJob("bad", "class (:", 0)] + [EpisodeJob("cb", CODE_BREAKER, i) for i in (1, 2)]
    with (
        FakeOpenAIServer(script=lambda r: "\\boxed{0123}") as server,
        pytest.raises(RuntimeError, match="store down"),
    ):
        _play_with(server, policy, jobs, on_finished=store_down)
    assert len(opened) == 3 and all(id(s) in closed for s in opened)


# The environment answers each reset differently (an unseeded draw): a replay cannot match.
DRIFTING = """
import random


class DriftingEnv:
    def reset(self, seed=None):
        self.n = 0
        return f"instance {random.random()}", {}

    def step(self, action):
        self.n += 1
        return f"step {self.n}", 0.0, False, False, {}
"""


def _play_with_a_slow_reply(policy, monkeypatch, code: str, slow: int | None) -> list:
    """One episode of ``code`` whose ``slow``-th reply (None: none) comes only once the jail
    has died of its wall limit (the request's own timeout is longer). The wait is for the
    event, the jail's process gone, not for a time: a limit of a few seconds leaves a loaded
    machine room to start the jail and play the turns before it."""
    import time

    limits = policy.limits.model_copy(update={"session_seconds": 5})
    short = policy.model_copy(update={"limits": limits})
    calls = []
    sessions: list[session_mod.JailedSession] = []
    start = session_mod.JailedSession.start

    def recorded_start(self, *args, **kwargs):
        sessions.append(self)
        return start(self, *args, **kwargs)

    monkeypatch.setattr(session_mod.JailedSession, "start", recorded_start)

    def replies(_request):
        calls.append(1)
        if len(calls) == slow:
            deadline = time.monotonic() + 120  # a guard: the limit kills it after ~5 s
            while any(s.alive for s in sessions) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not any(s.alive for s in sessions), "the jail outlived its wall limit"
        return "\\boxed{0123}"

    async def go(server):
        cfg = InferenceConfig(
            backend="openai", base_url=server.url, max_retries=0, request_timeout_s=300
        )
        b = OpenAIBackend(cfg, server.model)
        try:
            jobs = [EpisodeJob("env", code, 1)]
            return await run_episodes(b, jobs, RolloutSettings(max_turns=4), policy=short)
        finally:
            await b.aclose()

    with FakeOpenAIServer(script=replies) as server:
        return asyncio.run(go(server))


def test_a_play_that_outlives_its_session_goes_on_in_a_fresh_one(policy, monkeypatch):
    """A jail's wall limit counts the time its episode waits for the model: a model slower than
    the limit (here one reply) kills the session through no fault of the environment. The play
    goes on in a fresh session where it was (reset under its seed, its first move replayed and
    answered alike), and ends as a play with no wait would have."""
    (t,) = _play_with_a_slow_reply(policy, monkeypatch, CODE_BREAKER, slow=2)
    (plain,) = _play_with_a_slow_reply(policy, monkeypatch, CODE_BREAKER, slow=None)
    assert t.resumed == 1 and plain.resumed == 0
    assert not t.failed and t.failure is None and t.status == plain.status
    assert [(x.action, x.observation, x.reward) for x in t.turns] == [
        (x.action, x.observation, x.reward) for x in plain.turns
    ]
    assert len(t.turns) == 4 and t.messages == plain.messages


def test_a_play_whose_replay_answers_differently_is_our_failure(policy, monkeypatch):
    """Where the fresh session's answers differ from what the play saw (an environment not
    deterministic under its seed), the play cannot go on: it is ours, left out of every
    measure (not a 0 charged to the design), and no turn of it is kept to train on."""
    from spade.training.samples import samples_from_trajectories

    (t,) = _play_with_a_slow_reply(policy, monkeypatch, DRIFTING, slow=2)
    assert t.status == "inference_failed" and t.failed and t.resumed == 0
    assert t.failure is not None and t.failure["kind"] == "session_expired"
    assert "replay of its moves answered differently" in t.failure["reason"]
    assert len(t.turns) == 1  # the first move was played; the one the jail missed is not kept
    assert samples_from_trajectories([t]) == []  # nothing trained on an outage's 0
