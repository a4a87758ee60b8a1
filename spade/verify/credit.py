"""The ``perverse_credit`` check: a game whose credit rule rewards the wrong thing teaches it.

The 0.5B coder's rule splices of ``number_hunt`` passed every other check while scoring the
farther guess higher (``distance / self.top``), or a closer guess 0: the solution still wins,
random play still loses. This check plays the design's own moves and a few altered ones and
asks three things of the returns (the last reward of a terminated play, else 0):

- no play ends below 0: partial credit is a share of the win, in [0, 1] (a product over
  guesses, a penalty sum, can leave it);
- no play scores more than the solution's play: the designed way to win is the best way;
- where the design varies a parent (a reference at least
  :data:`~spade.verify.novelty.VARIANT_SIMILARITY` similar by source) whose credit rises as a
  guess gets closer, the design's does not fall: on each probe seed the parent's solution with
  its answer missed narrowly (the answer's last digit moved by one) and widely (every digit of it
  moved by five) is played on both; a parent that scores the near miss higher defines
  closeness, and a design that scores it lower on most of those seeds is perverse.

A miss is a solution whose last move is altered and then repeated until the play ends (a
guessing game ends when its guesses run out, and scores the closest guess then). A seed where
the altered move still wins, or a move without digits, defines nothing and is left out.
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


MISSES = ((1, 1, "near"), (None, 5, "far"))
"""(digits, shift, name) of the two misses: the answer's last digit moved by one, every digit
moved by five."""


def miss_plays(
    session: JailedSession, seed: int, solution: Sequence[str], cfg: VerifyConfig
) -> list[tuple[str, Episode]]:
    """The near and the far miss of ``solution`` on ``seed``, played, by name; none when the
    answer (its last move) has no digit."""
    if not solution or not any(ch.isdigit() for ch in solution[-1]):
        return []
    return [
        (name, _play(session, seed, [*solution[:-1], altered(solution[-1], digits, shift)], cfg))
        for digits, shift, name in MISSES
    ]


def misses(
    session: JailedSession, seed: int, solution: Sequence[str], cfg: VerifyConfig
) -> tuple[float, float] | None:
    """The returns of the near and the far miss of ``solution`` on ``seed``; None where they
    define nothing (no digit in the answer, a miss that still wins or never ends)."""
    plays = [episode for _, episode in miss_plays(session, seed, solution, cfg)]
    if not plays or any(not e.ended or e.succeeded(cfg.success_threshold) for e in plays):
        return None
    return plays[0].episode_return(), plays[1].episode_return()


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
        theirs = {s: misses(session, s, moves[s], cfg) for s in cfg.probe_seeds}
    except EnvFailure as exc:  # the parent broke: it defines nothing, and is not our failure
        return f"its parent {parent.name!r} failed ({exc.failure.kind})"
    finally:
        session.close()
    defined = [s for s, r in theirs.items() if r is not None and r[0] > r[1] + EPS]
    if not defined:
        return f"{parent.name!r}, which it varies, does not score a near miss above a far one"
    mine = {s: misses(ctx.session, s, moves[s], cfg) for s in defined}
    falls = [s for s, r in mine.items() if r is not None and r[0] < r[1] - EPS]
    if 2 * len(falls) > len(defined):
        s = falls[0]
        near, far = mine[s] or (0.0, 0.0)
        pnear, pfar = theirs[s] or (0.0, 0.0)
        raise _perverse(
            f"credit falls as the guess gets closer on {len(falls)} of {len(defined)} seeds: on"
            f" seed {s} a near miss of the answer {moves[s][-1]!r} scores {near:g}, a far miss"
            f" {far:g}; {parent.name!r}, which it varies, scores them {pnear:g} and {pfar:g}"
        )
    return f"a near miss scores at least a far one, as in {parent.name!r}, on {len(defined)} seeds"


def check_perverse_credit(ctx: Context) -> str:
    """The credit rule rewards the goal (see the module)."""
    return "; ".join((_check_range_and_best(ctx), _check_closeness(ctx)))


def _moves(episode: Episode, limit: int = 3) -> str:
    moves = [step[0] for step in episode.steps]
    shown = ", ".join(repr(m[:40]) for m in moves[:limit])
    return f"moves {shown}" + (f" and {len(moves) - limit} more" if len(moves) > limit else "")


def _perverse(reason: str) -> EnvFailure:
    return EnvFailure(Failure(FailureKind.PERVERSE_CREDIT, reason), fatal=False)
