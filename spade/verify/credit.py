"""The ``perverse_credit`` check: a game whose credit rule rewards the wrong thing teaches it.

The 0.5B coder's rule splices of ``number_hunt`` passed every other check while scoring the
farther guess higher (``distance / self.top``), or a closer guess 0: the solution still wins,
random play still loses. The 1.5B coder's splice of ``polynomial_probe`` scored a submission
lower the more coefficients it got right (``0.5 * (1 - right / 4)``, 0 for none right) and passed
a near-against-far comparison, as one right still beat none. This check plays the design's own
moves and a few altered ones and asks three things of the returns (the last reward of a
terminated play, else 0):

- no play ends below 0: partial credit is a share of the win, in [0, 1] (a product over
  guesses, a penalty sum, can leave it);
- no play scores more than the solution's play: the designed way to win is the best way;
- where the design varies a parent (a reference at least
  :data:`~spade.verify.novelty.VARIANT_SIMILARITY` similar by source), the design's credit does
  not fall where the parent's rises as a guess gets closer. On each probe seed the parent's
  solution is played, on both games, with its answer missed by each rung of a closeness
  :func:`ladder`: the near miss (the last digit moved by one), the last k digits each moved by
  five (k = 1 .. n - 1 for an answer of n digits, at most :data:`MIDDLE_RUNGS` of them, spaced),
  and the far miss (every digit moved by five). The parent's returns order the rungs: for every
  pair it scores strictly apart, the design must not score them strictly the other way. A seed
  with such a reversed pair is a fall; a design that falls on most of the seeds where the parent
  orders some pair is perverse. A flat rule (the same credit on every rung) never falls.

A miss is a solution whose last move is altered and then repeated until the play ends (a
guessing game ends when its guesses run out, and scores the closest guess then). What defines
nothing, precisely: an answer without digits gives no ladder; a rung whose play, on the parent
or on the design, still wins or does not end has no credit to compare and is left out of that
seed's pairs; a seed where the parent orders no pair of the rungs left, or where the parent's
solution does not win the design (it hides another answer there, as the same game over another
range does: the parent's misses would be unrelated guesses to it), is left out of the count.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spade.records import Failure, FailureKind
from spade.sandbox.failures import EnvFailure
from spade.sandbox.session import JailedSession
from spade.verify.episodes import Episode, play, random_policy, scripted
from spade.verify.novelty import open_reference

if TYPE_CHECKING:
    from spade.config import VerifyConfig
    from spade.verify.checks import Context

EPS = 1e-9
"""Returns closer than this are equal (credit rules compute in floats)."""


def altered(move: str, digits: int | None = 1, shift: int = 1) -> str:
    """``move`` with its last ``digits`` digits (every one: None) each moved ``shift`` up,
    modulo 10: ``shift`` 1 on one digit is a near miss of an answer, 5 on all a far miss (no
    digit keeps its value); ``move`` itself when it has no digit."""
    at = [i for i, ch in enumerate(move) if ch.isdigit()]
    chars = list(move)
    for i in at[len(at) - digits :] if digits is not None else at:
        chars[i] = str((int(chars[i]) + shift) % 10)
    return "".join(chars)


def _play(session: JailedSession, seed: int, moves: Sequence[str], cfg: VerifyConfig) -> Episode:
    policy = scripted(list(moves), filler=moves[-1] if moves else "")
    return play(
        session,
        seed,
        policy,
        max_steps=cfg.max_turns,
        reward_range=(cfg.reward_min, cfg.reward_max),
    )


MIDDLE_RUNGS = 6
"""At most this many rungs between the near and the far miss. Each rung is one play per probe
seed on the parent and one on the design, so an answer of many digits (twenty two-digit
numbers) would cost forty plays a seed on each; six, spaced from one digit moved to all but one,
keep the ladder spanning near to far (answers of up to seven digits get every k) at a bounded
cost."""


def _spaced(n: int) -> list[int]:
    """The k of the middle rungs for an answer of ``n`` digits: 1 .. n - 1 (n itself is the far
    miss), or :data:`MIDDLE_RUNGS` of them evenly spaced, 1 and n - 1 kept."""
    if n - 1 <= MIDDLE_RUNGS:
        return list(range(1, n))
    step = (n - 2) / (MIDDLE_RUNGS - 1)  # > 1 here: the rounded ks are distinct
    return [1 + round(i * step) for i in range(MIDDLE_RUNGS)]


def ladder(answer: str) -> list[tuple[str, str]]:
    """The misses of ``answer``, closest first, as (how it is missed, move): the near miss
    (its last digit moved by one), its last k digits each moved by five (:func:`_spaced`), the
    far miss (every digit moved by five) last; none when it has no digit. The parent's returns,
    not this order, say which rung is closer (a 9 moved by one is a 0: farther than by five)."""
    n = sum(ch.isdigit() for ch in answer)
    if not n:
        return []
    middle = [
        (f"its last {f'{k} digits' if k > 1 else 'digit'} moved by five", altered(answer, k, 5))
        for k in _spaced(n)
    ]
    return [
        ("its last digit moved by one (a near miss)", altered(answer, 1, 1)),
        *middle,
        ("every digit moved by five (a far miss)", altered(answer, None, 5)),
    ]


def miss_plays(
    session: JailedSession, seed: int, solution: Sequence[str], cfg: VerifyConfig
) -> list[tuple[str, Episode]]:
    """The near and the far miss of ``solution`` on ``seed``, played, by name ("near", "far");
    none when the answer (its last move) has no digit."""
    rungs = ladder(solution[-1]) if solution else []
    if not rungs:
        return []
    ends = (("near", rungs[0][1]), ("far", rungs[-1][1]))
    return [(name, _play(session, seed, [*solution[:-1], move], cfg)) for name, move in ends]


def ladder_returns(
    session: JailedSession,
    seed: int,
    solution: Sequence[str],
    cfg: VerifyConfig,
    only: set[int] | None = None,
) -> list[float | None]:
    """The return of each rung of ``solution``'s answer's :func:`ladder` on ``seed`` (only the
    rungs in ``only``, when given; the others None); None for a rung whose play still wins or
    never ends: it has no credit to compare."""
    rungs = ladder(solution[-1]) if solution else []
    out: list[float | None] = []
    for i, (_, move) in enumerate(rungs):
        if only is not None and i not in only:
            out.append(None)
            continue
        episode = _play(session, seed, [*solution[:-1], move], cfg)
        void = not episode.ended or episode.succeeded(cfg.success_threshold)
        out.append(None if void else episode.episode_return())
    return out


def _ordered(returns: Sequence[float | None]) -> list[tuple[int, int]]:
    """The pairs of rungs (i, j) whose returns put i strictly above j."""
    return [
        (i, j)
        for i, ri in enumerate(returns)
        for j, rj in enumerate(returns)
        if ri is not None and rj is not None and ri > rj + EPS
    ]


def _solutions(session: JailedSession, seeds: Sequence[int]) -> dict[int, list[str]]:
    out = {}
    for seed in seeds:
        session.reset(seed)
        out[seed] = session.solution()
    return out


def _check_range_and_best(ctx: Context) -> str:
    """No play below 0, none above the solution's (see the module)."""
    cfg = ctx.config
    assert ctx.replay is not None and ctx.empty_play is not None
    plays = [("the empty play", ctx.empty_play)]
    for i in range(cfg.random_episodes):  # the non-triviality check's random plays, again
        rng = random.Random(cfg.seed * 1000 + i)
        plays.append(
            (f"random play {i}", ctx.play(ctx.session, random_policy(rng, ctx.tool_names)))
        )
    missed = miss_plays(ctx.session, cfg.seed, ctx.solution, cfg)
    plays += [(f"the solution's {name} miss", episode) for name, episode in missed]
    if missed:
        far = missed[-1][1]
        if far.succeeded(cfg.success_threshold):
            raise _perverse(
                f"the solution with every digit of its answer changed still wins"
                f" ({_moves(far)}): the credit does not read the answer"
            )
    best = ctx.replay.episode_return()
    for label, episode in [("the solution's play", ctx.replay), *plays]:
        if episode.terminated and episode.final_reward < -EPS:
            raise _perverse(
                f"{label} ends with reward {episode.final_reward:g}: partial credit is a share of"
                f" the win, in [0, 1] ({_moves(episode)})"
            )
    for label, episode in plays:
        if episode.episode_return() > best + EPS:
            raise _perverse(
                f"{label} scores {episode.episode_return():g}, more than the solution's"
                f" {best:g} ({_moves(episode)})"
            )
    return f"{len(plays) + 1} plays end in [0, 1], none above the solution's {best:g}"


def _check_closeness(ctx: Context) -> str:
    """Where the parent's credit rises as a guess gets closer, the design's does not fall."""
    parent, cfg = ctx.parent, ctx.config
    if parent is None:
        return "no parent defines closeness"
    session, note = open_reference(parent, ctx.policy, cfg.max_turns)
    if session is None:
        return note
    try:
        moves = _solutions(session, cfg.probe_seeds)
        theirs = {s: ladder_returns(session, s, moves[s], cfg) for s in cfg.probe_seeds}
    except EnvFailure as exc:  # the parent broke: it defines nothing, and is not our failure
        return f"its parent {parent.name!r} failed ({exc.failure.kind})"
    finally:
        session.close()
    orders = {s: pairs for s, r in theirs.items() if (pairs := _ordered(r))}
    if not orders:
        return f"{parent.name!r}, which it varies, scores no miss of its answer above another"
    # The parent's misses are the design's only where the parent's answer wins the design: one
    # that hides another answer on a seed (the same game over another range) would be played
    # guesses unrelated to its answer, whose order means nothing.
    won = cfg.success_threshold
    orders = {
        s: p for s, p in orders.items() if _play(ctx.session, s, moves[s], cfg).succeeded(won)
    }
    if not orders:
        return f"the answers of {parent.name!r}, which it varies, do not win it: nothing to compare"
    falls: dict[int, tuple[list[float | None], list[tuple[int, int]]]] = {}
    for s, pairs in orders.items():  # the design plays only the rungs the parent orders
        mine = ladder_returns(ctx.session, s, moves[s], cfg, {k for pair in pairs for k in pair})
        mine_ordered = set(_ordered(mine))
        if reversed_ := [(i, j) for i, j in pairs if (j, i) in mine_ordered]:
            falls[s] = mine, reversed_
    if 2 * len(falls) > len(orders):
        s, (mine, reversed_) = next(iter(falls.items()))
        # the pair the parent sets widest apart: the plainest case of the fall
        i, j = max(reversed_, key=lambda p: (theirs[s][p[0]] or 0.0) - (theirs[s][p[1]] or 0.0))
        rungs = ladder(moves[s][-1])
        raise _perverse(
            f"credit falls as the guess gets closer on {len(falls)} of {len(orders)} seeds: on"
            f" seed {s} the answer {moves[s][-1]!r} with {rungs[i][0]} ({rungs[i][1]!r}) scores"
            f" {mine[i]:g}, with {rungs[j][0]} ({rungs[j][1]!r}) {mine[j]:g}; {parent.name!r},"
            f" which it varies, scores them {theirs[s][i]:g} and {theirs[s][j]:g}"
        )
    kept = sum(len(pairs) for pairs in orders.values())
    return (
        f"no closer miss of the answer scores below a farther one, as {parent.name!r}, which it"
        f" varies, orders them ({kept} pairs), on {len(orders) - len(falls)} of {len(orders)} seeds"
    )


def check_perverse_credit(ctx: Context) -> str:
    """The credit rule rewards the goal (see the module)."""
    return "; ".join((_check_range_and_best(ctx), _check_closeness(ctx)))


def _moves(episode: Episode, limit: int = 3) -> str:
    moves = [step[0] for step in episode.steps]
    shown = ", ".join(repr(m[:40]) for m in moves[:limit])
    return f"moves {shown}" + (f" and {len(moves) - limit} more" if len(moves) > limit else "")


def _perverse(reason: str) -> EnvFailure:
    return EnvFailure(Failure(FailureKind.PERVERSE_CREDIT, reason), fatal=False)
