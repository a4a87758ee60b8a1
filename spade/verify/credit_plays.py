"""The plays the ``perverse_credit`` check pays a design (and its parent) for: misses of the
answer and plays that make no progress.

A *miss* is the solution with its answer (its last move) missed by one rung of a closeness
:func:`ladder`, then repeated until the play ends (a guessing game ends when its guesses run
out, and scores the closest guess then). An *idle* play is one that gives no better answer than
a miss: the empty play, the malformed actions in turn, giving up (a quit word, at once, after the
solution's other moves, or after the near miss), one of the solution's other moves repeated, and
the near miss at once with the solution's other moves skipped (saving the budget). Each idle play
names the rung it contains, if any: what that miss is paid is what the idle play may earn.
Every play is scripted from a solution (the parent's, when the design is compared with it), so
the parent and the design are played exactly the same moves.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spade.sandbox.session import JailedSession
from spade.verify.episodes import Episode, Policy, play

if TYPE_CHECKING:
    from spade.config import VerifyConfig

QUIT_WORDS = ("give up", "quit", "done", "stop", "pass", "skip", "end", "surrender")
"""Played in turn as answers: a design that ends (and pays) a play on one of them lets the
player give up or stop early for credit."""

MIDDLE_RUNGS = 6
"""At most this many rungs between the near and the far miss. Each rung is one play per probe
seed on the parent and one on the design, so an answer of many digits (twenty two-digit
numbers) would cost forty plays a seed on each; six, spaced from one digit moved to all but one,
keep the ladder spanning near to far (answers of up to seven digits get every k) at a bounded
cost."""

_NUMBER = re.compile(r"\d+")


def altered(move: str, digits: int | None = 1, shift: int = 1) -> str:
    """``move`` with its last ``digits`` digits (every one: None) each moved ``shift`` up,
    modulo 10: ``shift`` 1 on one digit is a near miss of an answer, 5 on all a far miss (no
    digit keeps its value); ``move`` itself when it has no digit."""
    at = [i for i, ch in enumerate(move) if ch.isdigit()]
    chars = list(move)
    for i in at[len(at) - digits :] if digits is not None else at:
        chars[i] = str((int(chars[i]) + shift) % 10)
    return "".join(chars)


def _spaced(n: int) -> list[int]:
    """The k of the middle rungs for an answer of ``n`` digits: 1 .. n - 1 (n itself is the far
    miss), or :data:`MIDDLE_RUNGS` of them evenly spaced, 1 and n - 1 kept."""
    if n - 1 <= MIDDLE_RUNGS:
        return list(range(1, n))
    step = (n - 2) / (MIDDLE_RUNGS - 1)  # > 1 here: the rounded ks are distinct
    return [1 + round(i * step) for i in range(MIDDLE_RUNGS)]


def _reordered(move: str, answer: str) -> bool:
    """Whether ``move`` holds the numbers of ``answer`` in another order: a set-valued answer
    (cargo_knapsack's "load 1, 6" missed by five is "load 6, 1") reads it as the same answer, so
    it is no miss."""
    return sorted(_NUMBER.findall(move)) == sorted(_NUMBER.findall(answer))


def ladder(answer: str) -> list[tuple[str, str]]:
    """The misses of ``answer``, closest first, as (how it is missed, move): the near miss
    (its last digit moved by one), its last k digits each moved by five (:func:`_spaced`), the
    far miss (every digit moved by five) last; none when it has no digit, and none that only
    reorders its numbers (:func:`_reordered`). The parent's returns, not this order, say which
    rung is closer (a 9 moved by one is a 0: farther than by five)."""
    n = sum(ch.isdigit() for ch in answer)
    if not n:
        return []
    middle = [
        (f"its last {f'{k} digits' if k > 1 else 'digit'} moved by five", altered(answer, k, 5))
        for k in _spaced(n)
    ]
    rungs = [
        ("its last digit moved by one (a near miss)", altered(answer, 1, 1)),
        *middle,
        ("every digit moved by five (a far miss)", altered(answer, None, 5)),
    ]
    return [(how, move) for how, move in rungs if not _reordered(move, answer)]


@dataclass(frozen=True)
class Play:
    """A scripted play: ``moves`` in order, then ``then`` in turn until the play ends."""

    label: str
    moves: tuple[str, ...]
    then: tuple[str, ...]
    rung: int | None = None  # the ladder rung this miss is, or the one this idle play contains
    miss: bool = False  # a rung of the ladder itself, not an idle play
    own: bool = False  # the solution's own move repeated: a win by it is the design's, not paid


@dataclass(frozen=True)
class Outcome:
    """How a play ended: its return (0 unless it terminated) and the moves, for reasons."""

    ended: bool
    terminated: bool  # ended by the game, not cut off: its return is the game's credit
    won: bool
    pay: float
    shown: str

    @property
    def paid(self) -> bool:
        """Whether this miss has a credit to compare: it ended without winning."""
        return self.ended and not self.won


def _answer_form(answer: str, text: str) -> str:
    """``text`` in the wrapper of ``answer`` (``<answer>..</answer>`` or ``\\boxed{..}``)."""
    if answer.lstrip().startswith("<answer>"):
        return f"<answer>{text}</answer>"
    return "\\boxed{" + text + "}"


def plays_of(solution: Sequence[str], garbage: Sequence[str], idle: bool = True) -> list[Play]:
    """The misses of ``solution``'s answer (:func:`ladder`), then the idle plays (the module)
    unless not ``idle``."""
    if not solution:
        return []
    *before, answer = solution
    prefix = tuple(before)
    rungs = ladder(answer)
    out = [
        Play(f"the answer {answer!r} with {how} ({move!r})", (*prefix, move), (move,), i, True)
        for i, (how, move) in enumerate(rungs)
    ]
    if not idle:
        return out
    quits = tuple(_answer_form(answer, w) for w in QUIT_WORDS)
    out += [
        Play("the empty play", (), ("",)),
        Play("the malformed actions in turn", (), tuple(garbage) or ("",)),
        Play(f"giving up at once ({quits[0]!r}, ...)", (), quits),
    ]
    if prefix:
        out.append(Play("giving up after the solution's other moves", prefix, quits))
    if rungs:
        near = rungs[0][1]
        out.append(Play(f"giving up after the near miss {near!r}", (*prefix, near), quits, 0))
        if prefix:
            label = f"the near miss {near!r} at once, the solution's other moves skipped"
            out.append(Play(label, (near,), (near,), 0))
    for move in dict.fromkeys(prefix[:1] + prefix[-1:]):  # distinct, in order
        out.append(Play(f"the solution's move {move[:60]!r} repeated", (), (move,), own=True))
    return out


def _policy(p: Play) -> Policy:
    def act(turn: int, _obs: str) -> str:
        if turn < len(p.moves):
            return p.moves[turn]
        return p.then[(turn - len(p.moves)) % len(p.then)]

    return act


def shown(episode: Episode, limit: int = 3) -> str:
    """The first ``limit`` moves of ``episode`` and how many more, for a reason."""
    moves = [step[0] for step in episode.steps]
    shown = ", ".join(repr(m[:40]) for m in moves[:limit])
    return f"moves {shown}" + (f" and {len(moves) - limit} more" if len(moves) > limit else "")


def played(session: JailedSession, seed: int, p: Play, cfg: VerifyConfig) -> Outcome:
    """``p`` played on ``session`` from ``seed``, within the verifier's turn bound."""
    episode = play(
        session,
        seed,
        _policy(p),
        max_steps=cfg.max_turns,
        reward_range=(cfg.reward_min, cfg.reward_max),
    )
    won = episode.succeeded(cfg.success_threshold)
    ended, terminated = episode.ended, episode.terminated
    return Outcome(ended, terminated, won, episode.episode_return(), shown(episode))


def wins(session: JailedSession, seed: int, moves: Sequence[str], cfg: VerifyConfig) -> bool:
    """Whether ``moves``, the last one repeated, win ``session`` from ``seed``."""
    scripted = Play("", tuple(moves), (moves[-1],) if moves else ("",))
    return played(session, seed, scripted, cfg).won
