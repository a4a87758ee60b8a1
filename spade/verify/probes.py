"""What two games play side by side: plans of actions, per seed, that the novelty check plays
on a design and a reference in lockstep (:func:`spade.verify.novelty.play_side_by_side`).

The first plans (:func:`plans`) are cheap and decide most designs: a real variant differs
within them. A design that plays alike there is a suspected copy, and plays the more plans
(:func:`more_plans`) before it is called one: more seeds, near misses of its solution at
several distances, the reference's own solution.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from spade.verify.episodes import random_policy

Policy = Callable[[int, str], str]


@dataclass(frozen=True)
class Plan:
    """One action plan of the side-by-side play, for one seed."""

    seed: int
    label: str
    policy: Policy
    steps: int  # actions to play; the episode is reset (same seed) whenever it ends


def _cycle(actions: Sequence[str]) -> Policy:
    return lambda turn, _obs: actions[turn % len(actions)]


def near_miss(solution: Sequence[str]) -> list[str]:
    """The solution with one digit of its last move changed (up by one, 9 to 0): a nearly
    right answer, where a game's partial-credit rule shows; empty when that move has no digit."""
    if not solution:
        return []
    last = solution[-1]
    at = max((i for i, ch in enumerate(last) if ch.isdigit()), default=-1)
    if at < 0:
        return []
    changed = last[:at] + str((int(last[at]) + 1) % 10) + last[at + 1 :]
    return [*solution[:-1], changed]


def plans(
    seeds: Sequence[int],
    solutions: dict[int, list[str]],
    garbage: Sequence[str],
    tool_names: Sequence[str],
    random_episodes: int,
    max_turns: int,
) -> Iterator[Plan]:
    """What both environments play, per seed: the design's solution for that seed and its
    near miss (:func:`near_miss`) repeated for ``max_turns`` actions (a game lost with partial
    progress: a credit rule scoring only a game whose guesses ran out, ``code_breaker``'s, is
    never reached by the near miss played once), the other seeds' solutions (the same moves
    on another instance, where a reworded game keeps its correspondence of observations and a
    new clue breaks it), the malformed actions, then random play. Random plans hold
    their own RNG, consumed as they are played: make a fresh list for every side-by-side
    play."""
    for seed in seeds:
        solution = solutions.get(seed, [])
        if solution:
            yield Plan(seed, "solution", _cycle(solution), len(solution))
        missed = near_miss(solution)
        if missed:
            yield Plan(seed, "near-miss", _cycle(missed), max(len(missed), max_turns))
        for other, moves in solutions.items():
            if other != seed and moves:
                yield Plan(seed, f"seed {other}'s solution", _cycle(moves), len(moves))
        if garbage:
            yield Plan(seed, "malformed", _cycle(garbage), len(garbage))
        for i in range(random_episodes):
            rng = random.Random(seed * 1000 + i)
            yield Plan(seed, f"random {i}", random_policy(rng, tool_names), max_turns)


def near_misses(solution: Sequence[str], limit: int) -> list[list[str]]:
    """The solution with one digit of one move moved up or down by one (the last move first,
    its last digit first), each played once: answers near the right one at several distances
    and on both sides, and other queries, where what a clue adds shows (a "within 50" that
    the near miss, always one above, never leaves). At most ``limit`` of them."""
    out: list[list[str]] = []
    for i in reversed(range(len(solution))):
        move = solution[i]
        for at in reversed([j for j, ch in enumerate(move) if ch.isdigit()]):
            for delta in (1, -1):
                digit = str((int(move[at]) + delta) % 10)
                changed = [*solution[:i], move[:at] + digit + move[at + 1 :], *solution[i + 1 :]]
                if changed not in out:
                    out.append(changed)
                if len(out) >= limit:
                    return out
    return out


def more_plans(
    seeds: Sequence[int],
    solutions: dict[int, list[str]],
    theirs: dict[int, list[str]],
    tool_names: Sequence[str],
    random_episodes: int,
    max_turns: int,
    limit: int,
) -> Iterator[Plan]:
    """What a suspected copy plays next: on every seed of ``solutions`` the reference's own
    solution (``theirs``: a new rule that makes the design's solution win both games can make
    the reference's lose the design's, as a fee on payments does) and the design's near misses
    (:func:`near_misses`), then on ``seeds`` (new ones) what :func:`plans` plays, the malformed
    actions aside (they answer alike on every seed)."""
    for seed, solution in solutions.items():
        if theirs.get(seed):
            yield Plan(seed, "the reference's solution", _cycle(theirs[seed]), len(theirs[seed]))
        for k, missed in enumerate(near_misses(solution, limit)):
            yield Plan(seed, f"near-miss {k + 1}", _cycle(missed), len(missed))
    fresh = {s: solutions[s] for s in seeds if s in solutions}
    yield from plans(seeds, fresh, (), tool_names, random_episodes, max_turns)
