"""The ``informative`` check: what the agent sees must tell the instances apart.

``seed_dependence`` proves that instances differ (no one move list wins them all) and
``feasibility`` that code reading the hidden state wins; neither proves that an *agent* can
learn which instance it is in. If every probe seed shows the same first observation and answers
the same moves with the same observations, every policy plays all instances alike, and since no
fixed play wins them all (``seed_dependence``), none is winnable but by luck. The small coder's
rule splices did exactly this: a clue rewritten to ``f"Point {x}."`` names the point asked
about and nothing of the hidden polynomial. Rewards and the observations of an episode's last
step are not compared: learning at the end of an episode that one lost helps no play of it.

It samples plays (each probe seed's solution, the task's own words as moves, seeded random
play; the same moves on every seed), so it is a necessary condition only: a game that reveals
its instance to none of these plays is rejected, one that reveals it to some play passes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spade.records import Failure, FailureKind
from spade.sandbox.failures import EnvFailure
from spade.verify.episodes import WORD, Episode, Policy, play, random_policy, scripted

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


def _plans(ctx: Context) -> list[tuple[str, Policy]]:
    """Labelled plays, each rebuilt per seed (random plays hold their own RNG)."""
    cfg = ctx.config
    solutions = ctx.seed_solutions or {cfg.seed: ctx.solution}
    out: list[tuple[str, Policy]] = [
        (f"seed {seed}'s solution", scripted(moves)) for seed, moves in solutions.items() if moves
    ]
    out.append(("the task's words", task_words(ctx.tool_names)))
    for i in range(cfg.random_episodes):
        rng = random.Random(cfg.seed * 1000 + i)
        out.append((f"random {i}", random_policy(rng, ctx.tool_names)))
    return out


def check_informative(ctx: Context) -> str:
    """The probe seeds must not all look alike to every sampled play (see the module)."""
    cfg = ctx.config
    seeds = cfg.probe_seeds
    if len(seeds) < 2:
        return "not checked (one probe seed: verify.seed_probe_count is 0)"
    if len({tuple(s) for s in ctx.seed_solutions.values()}) == 1 and ctx.seed_solutions:
        # one solution wins every seed: no instance needs telling apart (only reached with
        # seed_dependence waived, since otherwise the first observations differ)
        return "not checked (the probe seeds share one solution: a fixed instance)"
    labels = [label for label, _ in _plans(ctx)]
    for k, label in enumerate(labels):
        views = []
        for seed in seeds:
            _, policy = _plans(ctx)[k]  # a fresh policy per seed: the same moves if all alike
            episode = play(
                ctx.session,
                seed,
                policy,
                max_steps=cfg.max_turns,
                reward_range=(cfg.reward_min, cfg.reward_max),
            )
            views.append(seen(episode))
        if not alike(views):
            return f"seeds {', '.join(map(str, seeds))} look different to {label} play"
    raise EnvFailure(
        Failure(
            FailureKind.UNSOLVABLE,
            f"seeds {', '.join(map(str, seeds))} look alike to every play tried"
            f" ({', '.join(labels)}): the same first observation and the same answers to the"
            " same moves, so no player can tell which instance it is in",
        ),
        fatal=False,
    )
