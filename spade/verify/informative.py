"""The ``informative`` check: what the agent sees must tell the instances apart.

``seed_dependence`` proves that instances differ (no one move list wins them all) and
``feasibility`` that code reading the hidden state wins; neither proves that an *agent* can
learn which instance it is in. If every probe seed shows the same first observation and answers
the same moves with the same observations, every policy plays all instances alike, and since no
fixed play wins them all (``seed_dependence``), none is winnable but by luck. The small coder's
rule splices did exactly this: a clue rewritten to ``f"Point {x}."`` names the point asked
about and nothing of the hidden polynomial. Rewards and the observations of an episode's last
step are not compared: learning at the end of an episode that one lost helps no play of it.

A design that varies a reference (a splice or an edit: at least :data:`VARIANT_SIMILARITY`
similar by source) is held to what the reference's moves told: when the answers to its moves
alone (the first observation left out) tell the seeds apart to no play, while in the reference
the same plays' answers do, its feedback was emptied (the 0.5B coder's clues for
``cargo_knapsack`` said "You are inspecting crate number 3." and nothing of the crate; the
capacity in the task text still differed by seed, so the first test passed them). The answers
are compared with the first observation's numbers masked (each by its place there): a clue that
repeats what the task text said tells the player nothing new, however much the task text differs
by seed (the 0.5B coder's ``cargo_knapsack`` clue that answered every inspection with the hold's
capacity passed before).

It samples plays (each probe seed's solution, the task's own words as moves, seeded random
play; the same moves on every seed), so it is a necessary condition only: a game that reveals
its instance to none of these plays is rejected, one that reveals it to some play passes.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from spade.records import Failure, FailureKind
from spade.sandbox.failures import EnvFailure
from spade.sandbox.session import JailedSession
from spade.verify.episodes import NUMBER, WORD, Episode, Policy, play, random_policy, scripted
from spade.verify.novelty import open_reference

if TYPE_CHECKING:
    from spade.verify.checks import Context


def seen(episode: Episode) -> list[str]:
    """What the agent saw in time to use it: the first observation and those of the steps
    before the episode's end."""
    return [episode.first_observation] + [s[1] for s in episode.steps if not (s[3] or s[4])]


def alike(views: list[list[str]]) -> bool:
    """Whether plays of the same moves saw the same things on every seed: each two of them up
    to the end of the shorter (a play that ended earlier, a win on its own seed, says nothing
    about the rest)."""
    for i, mine in enumerate(views):
        for theirs in views[i + 1 :]:
            common = min(len(mine), len(theirs))
            if mine[:common] != theirs[:common]:
                return False
    return True


def task_words(tool_names: Sequence[str]) -> Policy:
    """Each word and number of the first observation in turn, as a move (an answer for a
    tool-use task): a game that lists its candidates (eight words, one of them hidden) is
    probed with them, where random play rarely names one."""
    words: list[str] = []

    def act(turn: int, obs: str) -> str:
        if turn == 0:
            words[:] = list(dict.fromkeys(WORD.findall(obs))) or ["x"]
        word = words[turn % len(words)]
        return f"<answer>{word}</answer>" if tool_names else "\\boxed{" + word + "}"

    return act


def _plans(ctx: Context) -> list[tuple[str, Callable[[], Policy]]]:
    """Labelled plays, each a maker of a fresh policy (random plays hold their own RNG, so
    every seed gets its own: the same moves wherever the seeds look alike)."""
    cfg = ctx.config
    solutions = ctx.seed_solutions or {cfg.seed: ctx.solution}
    out: list[tuple[str, Callable[[], Policy]]] = [
        (f"seed {seed}'s solution", partial(scripted, moves))
        for seed, moves in solutions.items()
        if moves
    ]
    out.append(("the task's words", partial(task_words, ctx.tool_names)))
    for i in range(cfg.random_episodes):
        out.append((f"random {i}", partial(_random, cfg.seed * 1000 + i, ctx.tool_names)))
    return out


def _random(seed: int, tool_names: Sequence[str]) -> Policy:
    return random_policy(random.Random(seed), tool_names)


def views(ctx: Context, session: JailedSession) -> list[tuple[str, list[list[str]]]]:
    """Each sampled play's label and what it saw on each probe seed in ``session``
    (:func:`seen`), every play played once."""
    cfg = ctx.config
    out = []
    for label, make in _plans(ctx):
        seen_by_seed = [
            seen(
                play(
                    session,
                    seed,
                    make(),
                    max_steps=cfg.max_turns,
                    reward_range=(cfg.reward_min, cfg.reward_max),
                )
            )
            for seed in cfg.probe_seeds
        ]
        out.append((label, seen_by_seed))
    return out


def masked(view: list[str]) -> list[str]:
    """``view`` (a play's first observation, then its answers) with each number of the first
    observation replaced in the answers by its place there: what an answer repeats of the task
    text reads alike on every seed."""
    places = {n: i for i, n in reversed(list(enumerate(NUMBER.findall(view[0]))))}

    def mask(match: re.Match[str]) -> str:
        place = places.get(match.group())
        return match.group() if place is None else f"<task number {place}>"

    return [view[0], *(NUMBER.sub(mask, answer) for answer in view[1:])]


def telling_play(played: list[tuple[str, list[list[str]]]], *, first: bool = True) -> str | None:
    """The label of the first play for which the probe seeds look different (with ``first``
    False, judged by the steps' observations alone, what they repeat of the first masked:
    :func:`masked`); None when they look alike to every play."""
    for label, by_seed in played:
        if not alike([v if first else masked(v)[1:] for v in by_seed]):
            return label
    return None


def check_informative(ctx: Context) -> str:
    """The probe seeds must not all look alike to every sampled play, and a variant of a
    reference must not empty the feedback its moves got there (see the module)."""
    cfg = ctx.config
    seeds = ", ".join(map(str, cfg.probe_seeds))
    if len(cfg.probe_seeds) < 2:
        return "not checked (one probe seed: sandbox.verify.seed_probe_count is 0)"
    if len({tuple(s) for s in ctx.seed_solutions.values()}) == 1 and ctx.seed_solutions:
        # one solution wins every probe seed: no instance needs telling apart there (reached
        # with seed_dependence waived, or when more seeds showed other solutions)
        return "not checked (the probe seeds share one solution: nothing to tell apart on them)"
    played = views(ctx, ctx.session)
    label = telling_play(played)
    if label is None:
        raise _unsolvable(
            f"seeds {seeds} look alike to every play tried: the same first observation and"
            " the same answers to the same moves, so no player can tell which instance it is in"
        )
    reason = f"seeds {seeds} look different to {label} play"
    if telling_play(played, first=False) is not None:
        return reason
    parent = ctx.parent
    if parent is None:
        return reason + "; its moves' answers alone tell them apart to no play"
    session, note = open_reference(parent, ctx.policy, cfg.max_turns)
    if session is None:
        return f"{reason}; {note}"
    try:
        told = telling_play(views(ctx, session), first=False)
    except EnvFailure:  # the reference breaks on the design's moves: not that game's moves
        told = None
    finally:
        session.close()
    if told is not None:
        raise _unsolvable(
            f"its moves are answered alike on seeds {seeds} (every play tried; what the"
            " answers repeat of the task text masked), where in"
            f" {parent.name!r}, which it varies, the answers to {told} play tell them apart:"
            " the feedback no longer says anything of the instance"
        )
    return reason + f"; its moves' answers tell them apart to no play, nor in {parent.name!r}"


def _unsolvable(reason: str) -> EnvFailure:
    return EnvFailure(Failure(FailureKind.UNSOLVABLE, reason), fatal=False)
