"""The ``winnable`` check: a design that keeps its parent's feedback must be won by playing.

``feasibility`` replays ``solution()``, which reads the hidden state: a clue that lies on some
instances (number_hunt's direction inverted when the number is even) or is noise (code_breaker's
count off by one on some turns) still passes it. This check plays the design with the
observation-only player of the bundled example it varies (:mod:`spade.verify.players`: our own
code, which reads only what it is told) on ``sandbox.verify.player_seeds`` seeds. The design's
bundled parent is ``ctx.parent`` when that is a bundled example by source, else the bundled
example most similar by source, at least :data:`~spade.verify.novelty.VARIANT_SIMILARITY`.

The player must win all seeds but one in eight (:func:`~spade.verify.leaks.needed`, the bar of
``leaks_answer``). A player is not perfect everywhere (no observation-only walk finds every maze
exit in time): when it loses more than that, the parent is played on the same seeds at the
design's sizes, and the design is rejected only if it loses more seeds than the parent does
plus the one in eight. A player abstains on an observation it does not read (feedback reworded):
when it abstains on most seeds the check passes and says that no observation-only player
applies; so it does when the design varies no bundled example, and when the player loses a
design whose task text says what its parent's does not (:func:`new_words`: a fee, a limit, a new
kind of lamp): the player knows only the parent's rules. A lie told beside a reworded task text
is not caught here.
"""

from __future__ import annotations

import difflib
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from spade.envs.examples import example_paths
from spade.pysource import PARSE_ERRORS
from spade.records import Failure, FailureKind
from spade.sandbox.failures import EnvFailure
from spade.sandbox.session import JailedSession
from spade.verify.episodes import check_reward
from spade.verify.leaks import needed
from spade.verify.novelty import (
    VARIANT_SIMILARITY,
    Reference,
    reference_sizes,
    sizes_text,
    source_tokens,
)
from spade.verify.players import PLAYERS, Abstain, Contradiction, Player, clip

if TYPE_CHECKING:
    from spade.config import VerifyConfig
    from spade.verify.checks import Context

NOT_APPLICABLE = "no observation-only player applies"
_UNPARSABLE = (*PARSE_ERRORS, tokenize.TokenError)


@cache
def bundled() -> tuple[Reference, ...]:
    """The bundled examples, named by file stem (the keys of :data:`PLAYERS`)."""
    return tuple(Reference(p.stem, p.read_text(encoding="utf-8")) for p in example_paths())


@cache
def _tokens(code: str, max_tokens: int) -> list[str]:
    return source_tokens(code, max_tokens)


def bundled_parent(code: str, parent: Reference | None, max_tokens: int) -> Reference | None:
    """The bundled example ``code`` varies: ``parent`` if it is one by source, else the most
    similar by source at least :data:`VARIANT_SIMILARITY` (difflib ratio over normalised
    tokens, as :func:`~spade.verify.novelty.similarity`; the examples' tokens made once)."""
    examples = bundled()
    if parent is not None:
        same = [ref for ref in examples if ref.code.strip() == parent.code.strip()]
        if same:
            return same[0]
    try:
        mine = source_tokens(code, max_tokens)
    except _UNPARSABLE:  # the parse check judged it; nothing to compare
        return None
    best, found = VARIANT_SIMILARITY, None
    for ref in examples:
        matcher = difflib.SequenceMatcher(None, _tokens(ref.code, max_tokens), mine, autojunk=False)
        if matcher.real_quick_ratio() < best or matcher.quick_ratio() < best:
            continue  # difflib's cheap upper bounds: this one cannot reach the best
        if (ratio := matcher.ratio()) >= best:
            best, found = ratio, ref
    return found


@dataclass
class Outcome:
    """One seed played by a player: won, lost (why) or abstained (why)."""

    seed: int
    moves: list[str] = field(default_factory=list)
    last: str = ""
    reward: float | None = None
    won: bool = False
    abstained: str = ""
    contradiction: str = ""

    def describe(self) -> str:
        moves = ", ".join(self.moves[:3]) + (", ..." if len(self.moves) > 3 else "")
        head = f"seed {self.seed}, after {len(self.moves)} moves ({moves})"
        if self.contradiction:
            return f"{head}: {self.contradiction}"
        ended = "ends" if self.reward is not None else "does not end"
        reward = f" with reward {self.reward:g}" if self.reward is not None else ""
        return f"{head} it {ended}{reward}: {clip(self.last)}"


def play_player(session: JailedSession, seed: int, player: Player, config: VerifyConfig) -> Outcome:
    """Play ``player`` on ``seed`` for at most ``config.max_turns`` turns."""
    obs, _ = session.reset(seed)
    out = Outcome(seed, last=obs)
    for turn in range(config.max_turns):
        try:
            move = player(turn, obs)
        except Abstain as exc:
            out.abstained = str(exc)
            return out
        except Contradiction as exc:
            out.contradiction = f"it was told {exc}"
            return out
        out.moves.append(move)
        obs, reward, terminated, truncated, _ = session.step(move)
        check_reward(reward, config.reward_min, config.reward_max)
        out.last = obs
        if terminated or truncated:
            out.reward = reward
            out.won = terminated and reward >= config.success_threshold
            return out
    return out


def play_all(
    session: JailedSession, name: str, seeds: Sequence[int], config: VerifyConfig
) -> list[Outcome]:
    return [play_player(session, seed, PLAYERS[name](), config) for seed in seeds]


def losses(outcomes: Sequence[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if not o.won and not o.abstained]


def parent_losses(
    ctx: Context, parent: Reference, seeds: Sequence[int]
) -> tuple[int | None, str, str]:
    """Seeds the player loses in the parent played at the design's sizes, where it was played
    (None and why when the parent cannot be played there), and the parent's first observation
    on the first seed ("" when it cannot be played)."""
    cfg = ctx.config
    sizes = reference_sizes(parent.code, ctx.code)  # the design's defaults the parent shares
    where = f"{parent.name!r}" + (f" at the design's sizes ({sizes_text(sizes)})" if sizes else "")
    session = JailedSession(
        parent.code, policy=ctx.policy, env_kwargs={"max_turns": cfg.max_turns, **sizes}
    )
    try:
        session.start()
        opening, _ = session.reset(seeds[0])
        return len(losses(play_all(session, parent.name, seeds, cfg))), where, opening
    except EnvFailure as exc:  # not the design's failure: no allowance from its parent
        return None, f"{where} could not be played ({exc.failure.kind})", ""
    finally:
        session.close()


_WORD = re.compile(r"[^\W\d_]{3,}")


def new_words(opening: str, parents: str) -> list[str]:
    """The words (three letters or more, any case) of ``opening`` that ``parents`` (the parent's
    opening on the same seed) never uses, in order: what the design's task text adds."""
    known = {w.lower() for w in _WORD.findall(parents)}
    return list(dict.fromkeys(w for w in _WORD.findall(opening) if w.lower() not in known))


def check_winnable(ctx: Context) -> str:
    """The bundled parent's observation-only player wins the design (see the module)."""
    cfg = ctx.config
    if cfg.player_seeds == 0:
        return "not checked (sandbox.verify.player_seeds is 0)"
    parent = bundled_parent(ctx.code, ctx.parent, cfg.similarity_max_tokens)
    if parent is None or parent.name not in PLAYERS:
        return f"{NOT_APPLICABLE}: the design varies no bundled example"
    name, n = parent.name, cfg.player_seeds
    seeds = [(cfg.seed + i) % 2**32 for i in range(n)]
    outcomes = play_all(ctx.session, name, seeds, cfg)
    abstained = [o for o in outcomes if o.abstained]
    if 2 * len(abstained) > n:
        return (
            f"{NOT_APPLICABLE}: the {name} player does not read this design's observations on"
            f" {len(abstained)} of {n} seeds (feedback reworded?): seed {abstained[0].seed}:"
            f" {abstained[0].abstained}"
        )
    lost, wins = losses(outcomes), sum(o.won for o in outcomes)
    allowed = n - needed(n)
    head = f"the {name} player, reading only the observations, wins {wins} of {n} seeds"
    skipped = f" (it does not read {len(abstained)})" if abstained else ""
    if len(lost) <= allowed:
        return head + skipped
    theirs, where, opening = parent_losses(ctx, parent, seeds)
    if theirs is not None and len(lost) <= allowed + theirs:
        # the player's own shortfall (or the sizes'), not the feedback's: the parent loses too
        return f"{head}{skipped}; it loses {theirs} of them in {where}, which the design varies"
    if opening and (added := new_words(ctx.session.reset(seeds[0])[0], opening)):
        # the task text states what the parent's does not (a fee, a limit, a new kind of
        # lamp): a rule the player does not know, so its losses say nothing of the feedback
        return (
            f"{NOT_APPLICABLE}: {head}{skipped}, but the design's task text says what"
            f" {parent.name!r}'s does not ({', '.join(added[:6])}): a rule its player does not"
            " know"
        )
    note = where if theirs is None else f"in {where}, which it varies, it loses {theirs}"
    raise EnvFailure(
        Failure(
            FailureKind.UNSOLVABLE,
            f"{head}{skipped}, {needed(n)} needed ({note}): "
            + "; ".join(o.describe() for o in lost[:2]),
        ),
        fatal=False,
    )
