"""The bundled examples, played through the sandbox: each is multi-turn, hides its state and
gives partial reward; together they cover the six cognitive skills and tool use.

Nothing here knows a particular example: the plays are built from each example's own
``solution()`` (garbage before it, or one of its actions changed), so a new example is held
to the same bar.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from spade.config import COGNITIVE_SKILLS, TOOL_SKILLS, VerifyConfig
from spade.envs import extract_answer, extract_boxed
from spade.envs.examples import example_paths
from spade.sandbox import JailedSession, SandboxPolicy
from spade.verify.episodes import Episode, play, scripted

pytestmark = pytest.mark.sandbox

CONFIG = VerifyConfig()
SEED, OTHER_SEED = CONFIG.seed, CONFIG.seed + 1
GARBAGE = ["", "hello", "\\boxed{}", "<answer", '<tool_call>{"name": "nope"}</tool_call>']
MAX_PLAYS = 400  # bound on the partial-reward search per example


@pytest.fixture
def session(example_path: Path, policy: SandboxPolicy) -> Iterator[JailedSession]:
    code = example_path.read_text(encoding="utf-8")
    with JailedSession(code, env_kwargs={"max_turns": CONFIG.max_turns}, policy=policy) as s:
        yield s


def run(session: JailedSession, seed: int, actions: list[str], filler: str = "") -> Episode:
    """``actions``, then ``filler`` until the episode ends or the turn bound."""
    return play(
        session,
        seed,
        scripted(actions, filler),
        max_steps=CONFIG.max_turns,
        reward_range=(CONFIG.reward_min, CONFIG.reward_max),
    )


def solution_of(session: JailedSession, seed: int) -> list[str]:
    session.reset(seed)
    return list(session.solution())


def payload(action: str) -> str:
    """What an action says: its ``\\boxed{}`` or ``<answer>`` content, else the whole text."""
    for inner in (extract_boxed(action), extract_answer(action)):
        if inner is not None:
            return inner.strip()
    return action.strip()


def test_a_garbage_first_action_does_not_end_the_episode(session: JailedSession):
    """Multi-turn: after a garbage first action the episode goes on, and the solution played
    next still reaches the goal, in two turns or more."""
    solution = solution_of(session, SEED)
    for garbage in GARBAGE:
        episode = run(session, SEED, [garbage, *solution])
        first = episode.steps[0]
        assert not first[3] and not first[4], f"{garbage!r} ended the episode: {first[1]!r}"
        assert episode.succeeded(CONFIG.success_threshold), (garbage, episode.steps[-1][1])
        assert len(episode.steps) == 1 + len(solution) >= 2


def test_the_first_observation_hides_the_answer(session: JailedSession):
    """Hidden state: the decisive action's content is nowhere in the first observation, and
    the instance matters: another seed has another solution, and this one does not solve it."""
    first_obs, _ = session.reset(SEED)
    solution = list(session.solution())
    decisive = payload(solution[-1])
    if len(decisive) >= 3:  # a single move ("E") is in every rules text
        assert decisive not in first_obs
    assert " ".join(payload(a) for a in solution) not in first_obs
    other = solution_of(session, OTHER_SEED)
    assert other != solution
    replayed = run(session, OTHER_SEED, solution)
    assert not replayed.succeeded(CONFIG.success_threshold), replayed.steps[-1][1]


def mutations(action: str, solution: list[str]) -> Iterator[str]:
    """Near misses of ``action``: one digit changed, two words swapped, another of the
    solution's actions."""
    for i, ch in enumerate(action):
        if ch.isdigit():
            for d in "0123456789":
                if d != ch:
                    yield action[:i] + d + action[i + 1 :]
    words = list(re.finditer(r"[A-Za-z]+", action))
    for a in range(len(words)):
        for b in range(a + 1, len(words)):
            x, y = words[a], words[b]
            if x.group() != y.group():
                yield (
                    action[: x.start()]
                    + y.group()
                    + action[x.end() : y.start()]
                    + x.group()
                    + action[y.end() :]
                )
    yield from dict.fromkeys(other for other in solution if other != action)


def partial_plays(solution: list[str]) -> Iterator[tuple[list[str], str]]:
    """Non-solution plays: the solution up to one changed action, which then repeats."""
    for i in reversed(range(len(solution))):
        for changed in mutations(solution[i], solution):
            yield [*solution[:i], changed], changed


def test_some_non_solution_play_earns_partial_reward(session: JailedSession):
    """Partial reward: a near miss of the solution ends with a reward strictly between what
    doing nothing earns and what the solution earns (or earns a reward on the way)."""
    solution = solution_of(session, SEED)
    solved = run(session, SEED, solution).final_reward
    floor = run(session, SEED, []).episode_return()
    assert floor < solved
    tried = 0
    for actions, filler in partial_plays(solution):
        episode = run(session, SEED, actions, filler)
        rewards = [step[2] for step in episode.steps]
        ended_between = episode.terminated and floor < episode.final_reward < solved
        on_the_way = any(r > floor for r in rewards[:-1])
        if ended_between or on_the_way:
            assert actions != solution
            return
        tried += 1
        if tried >= MAX_PLAYS:
            break
    pytest.fail(f"no partial reward in {tried} near misses of the solution {solution}")


def test_the_examples_cover_the_cognitive_skills_and_tool_use(policy):
    paths = example_paths()
    assert len(paths) >= 8
    games, tools = set(), set()
    for path in paths:
        with JailedSession(path.read_text(encoding="utf-8"), policy=policy) as s:
            assert s.info is not None and s.info.skill, path.name
            skill, tool_use = s.info.skill, s.info.tool_use
        assert tool_use == (skill in TOOL_SKILLS), path.name
        (tools if tool_use else games).add(skill)
    assert games == set(COGNITIVE_SKILLS)
    assert tools and tools <= set(TOOL_SKILLS)
