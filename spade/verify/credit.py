"""The ``perverse_credit`` check: a game whose credit rule rewards the wrong thing teaches it.

The 0.5B coder's rule splices of ``number_hunt`` passed every other check while scoring the
farther guess higher (``distance / self.top``), or a closer guess 0; the 1.5B coder's splice of
``polynomial_probe`` scored a submission lower the more coefficients it got right. A red team of
rewrites then showed misses paid nearly as much as a win, or whatever the answer; plays that make
no progress paid; on some seeds a farther miss paid more, or a wrong answer paid as a win. The
check plays, on each of ``credit_seeds`` seeds, the misses of the answer, and on the first the
idle plays, of :mod:`spade.verify.credit_plays`, and judges the returns (the last reward of a
terminated play, else 0). First, on the design alone:

- no play ends below 0 (partial credit is a share of the win, in [0, 1]), and none scores more
  than the solution's play (the designed way to win is the best way).

Where the design varies a parent (a reference at least
:data:`~spade.verify.novelty.VARIANT_SIMILARITY` similar by source) and the parent's solution
wins the design on a seed, the parent's plays of that seed are played on both games, and on
*any* such seed:

- no miss wins the design unless it wins the parent too (a tolerant numeric answer);
- for every pair of misses the parent pays strictly apart, the design does not pay them strictly
  the other way (a reversal: credit falls as the guess gets closer);
- no miss is paid more than ``max(parent's pay for it, max_miss_credit)``: a rewrite may add
  honest closeness credit to a parent that pays misses 0, up to the ceiling, and may keep what
  its parent pays (cargo_knapsack pays a load 99% of the best 0.99), but a flat credit above the
  ceiling where the parent orders the misses pays nearly a win whatever the answer;
- the misses the parent orders are not all paid one positive amount, on every seed: such a
  credit does not read the answer (it pays a submission, any submission). Its size does not
  change what it rewards: about 1e-6 for any miss is as perverse as 0.45, merely harmless to a
  learner; a stricter credit that pays every miss 0 rewards nothing and passes;
- no idle play is paid more than the parent pays the same play, or than the design pays the miss
  it contains (giving up after a miss earns that miss's credit, not more), or, where the parent
  pays no miss anything on the seed, than the design's best-paid miss.

On a seed without that parent (no parent, one that does not load, or whose solution there hides
another answer, as the same game over another range does), the design's own solution is
missed, and: no miss wins; not every miss on every such seed is paid above ``max_miss_credit``
(nearly a win whatever the answer); no idle play is paid more than the design's best-paid miss
on the seed. Closeness itself is judged only against a parent.

A miss that does not end, on either game, has no credit to compare; an answer without digits
gives no misses (its idle plays are still compared with the parent's). The idle plays are played
on the verifier's seed only: what a rule pays for not answering rarely depends on the instance,
and an idle play that never ends costs ``max_turns`` steps (a game that parses each quit word
with math_verify spends ~0.15 s a step).

Why ``max(parent's pay, ceiling)`` and not the parent's pay alone: a parent that pays misses 0
would forbid every honest closeness credit, and a parent's ``0.5 * right / 4`` every
proportional ``right / 4``; the ceiling keeps "nearly a win for any miss" out either way, and a
parent that pays more than it (switchboard's 5 of 6 lamps, 0.83) is the standard its rewrites
keep. Idle plays get no such allowance: closeness is earned by an answer, and a play that gives
none earns what the parent pays it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spade.records import Failure, FailureKind
from spade.sandbox.failures import EnvFailure
from spade.sandbox.session import JailedSession
from spade.verify.credit_plays import Outcome, Play, played, plays_of, shown, wins
from spade.verify.episodes import random_policy
from spade.verify.novelty import open_reference

if TYPE_CHECKING:
    from spade.config import VerifyConfig
    from spade.verify.checks import Context

EPS = 1e-9
"""Returns closer than this are equal (credit rules compute in floats)."""


@dataclass
class SeedPlays:
    """One credit seed's plays, the design's outcomes, and the parent's when it is compared."""

    seed: int
    plays: list[Play]
    mine: list[Outcome]
    theirs: list[Outcome] | None = None

    def misses(self) -> list[int]:
        return [i for i, p in enumerate(self.plays) if p.miss]

    def best_miss(self) -> float | None:
        """The most the design pays a miss here; None when no miss ends."""
        paid = [self.mine[i].pay for i in self.misses() if self.mine[i].paid]
        return max(paid) if paid else None

    def rung_pay(self, rung: int) -> float | None:
        """What the design pays the miss at ``rung``, when it ends without winning."""
        for i in self.misses():
            if self.plays[i].rung == rung and self.mine[i].paid:
                return self.mine[i].pay
        return None


def _check_range_and_best(ctx: Context, seeds: Sequence[SeedPlays]) -> int:
    """No play below 0, none above the solution's (see the module); the plays judged."""
    cfg = ctx.config
    assert ctx.replay is not None and ctx.empty_play is not None
    plays = [("the empty play", ctx.empty_play.episode_return(), shown(ctx.empty_play))]
    for i in range(cfg.random_episodes):  # the non-triviality check's random plays, again
        rng = random.Random(cfg.seed * 1000 + i)
        episode = ctx.play(ctx.session, random_policy(rng, ctx.tool_names))
        plays.append((f"random play {i}", episode.episode_return(), shown(episode)))
    for sp in seeds:
        plays += [(f"on seed {sp.seed}, {p.label}", o.pay, o.shown) for p, o in _pairs(sp)]
    best = ctx.replay.episode_return()
    for label, pay, moves in [("the solution's play", best, shown(ctx.replay)), *plays]:
        if pay < -EPS:
            raise _perverse(
                f"{label} ends with reward {pay:g}: partial credit is a share of the win, in"
                f" [0, 1] ({moves})"
            )
        if pay > best + EPS:  # the solution's own play is not above itself
            raise _perverse(f"{label} scores {pay:g}, more than the solution's {best:g} ({moves})")
    return len(plays) + 1


def _pairs(sp: SeedPlays) -> list[tuple[Play, Outcome]]:
    return list(zip(sp.plays, sp.mine, strict=True))


def _check_wins(seeds: Sequence[SeedPlays], parent: str | None) -> None:
    """No miss wins the design, unless it wins the parent too."""
    for sp in seeds:
        for i in sp.misses():
            mine, theirs = sp.mine[i], sp.theirs[i] if sp.theirs else None
            if mine.won and not (theirs and theirs.won):
                also = (
                    f"; {parent!r}, which it varies, pays it {theirs.pay:g}"
                    if theirs is not None
                    else ""
                )
                raise _perverse(
                    f"a wrong answer wins: on seed {sp.seed}, {sp.plays[i].label} wins"
                    f" ({mine.shown}){also}"
                )


def _ordered(returns: Sequence[float | None]) -> list[tuple[int, int]]:
    """The pairs of positions (i, j) whose returns put i strictly above j."""
    return [
        (i, j)
        for i, ri in enumerate(returns)
        for j, rj in enumerate(returns)
        if ri is not None and rj is not None and ri > rj + EPS
    ]


def _check_reversals(seeds: Sequence[SeedPlays], parent: str) -> int:
    """No pair of misses the parent orders is paid the other way, on any seed; the pairs."""
    falls, kept, compared = {}, 0, 0
    for sp in seeds:
        if sp.theirs is None:
            continue
        both = [i for i in sp.misses() if sp.mine[i].paid and sp.theirs[i].paid]
        pairs = _ordered([sp.theirs[i].pay for i in both])
        mine = set(_ordered([sp.mine[i].pay for i in both]))
        compared += bool(pairs)
        kept += len(pairs)
        if reversed_ := [(both[i], both[j]) for i, j in pairs if (j, i) in mine]:
            falls[sp.seed] = sp, reversed_
    if falls:
        sp, reversed_ = next(iter(falls.values()))
        assert sp.theirs is not None
        t = sp.theirs
        # the pair the parent sets widest apart: the plainest case of the fall
        i, j = max(reversed_, key=lambda p: t[p[0]].pay - t[p[1]].pay)
        raise _perverse(
            f"credit falls as the guess gets closer on {len(falls)} of {compared} seeds: on"
            f" seed {sp.seed} {sp.plays[i].label} scores {sp.mine[i].pay:g}, {sp.plays[j].label}"
            f" {sp.mine[j].pay:g}; {parent!r}, which it varies, scores them {t[i].pay:g} and"
            f" {t[j].pay:g}"
        )
    return kept


def _check_miss_pay(seeds: Sequence[SeedPlays], parent: str | None, cfg: VerifyConfig) -> int:
    """No miss paid above its parent's pay and the ceiling; without a parent, not every miss
    above the ceiling. The misses compared."""
    ceiling, compared, own = cfg.max_miss_credit, 0, []
    for sp in seeds:
        if sp.theirs is None:
            own += [(sp, i) for i in sp.misses() if sp.mine[i].paid]
            continue
        paid = [i for i in sp.misses() if sp.mine[i].paid]
        for i in paid:
            compared += 1
            theirs = sp.theirs[i]
            bar = max(ceiling, (1.0 if theirs.won else theirs.pay) if theirs.ended else 0.0)
            if sp.mine[i].pay > bar + EPS:
                raise _perverse(_overpaid(sp, i, paid, parent, ceiling))
    if len(own) >= 2 and min(sp.mine[i].pay for sp, i in own) > ceiling + EPS:
        sp, i = min(own, key=lambda m: m[0].mine[m[1]].pay)
        raise _perverse(
            f"every miss of the answer on {len({m[0].seed for m in own})} seeds is paid more"
            f" than max_miss_credit {ceiling:g}, nearly a win whatever the answer: the least,"
            f" on seed {sp.seed}, {sp.plays[i].label} pays {sp.mine[i].pay:g}"
        )
    return compared + len(own)


def _check_flat(seeds: Sequence[SeedPlays], parent: str | None) -> None:
    """Misses the parent orders are not all paid one positive amount (see the module)."""
    ordered = []
    for sp in seeds:
        if sp.theirs is None:
            continue
        # misses the design's credit paid (a play cut off at the turn bound is paid 0 by it)
        both = [
            i
            for i in sp.misses()
            if sp.mine[i].paid and sp.mine[i].terminated and sp.theirs[i].paid
        ]
        if _ordered([sp.theirs[i].pay for i in both]):
            ordered += [(sp, i) for i in both]
    pays = [sp.mine[i].pay for sp, i in ordered]
    if pays and min(pays) > EPS and max(pays) - min(pays) <= EPS:
        theirs = sorted(sp.theirs[i].pay for sp, i in ordered if sp.theirs is not None)
        raise _perverse(
            f"every miss of the answer is paid {pays[0]:g} whatever it is, on"
            f" {len({sp.seed for sp, _ in ordered})} seeds ({len(pays)} misses), where {parent!r},"
            f" which it varies, pays them {theirs[0]:g} to {theirs[-1]:g}: the credit does not"
            " read the answer (a stricter credit pays a miss 0)"
        )


def _overpaid(sp: SeedPlays, i: int, paid: Sequence[int], parent: str | None, c: float) -> str:
    assert sp.theirs is not None
    mine, theirs = sp.mine[i], sp.theirs[i]
    pays = {round(sp.mine[k].pay, 9) for k in paid}
    theirs_pays = sorted(sp.theirs[k].pay for k in paid if sp.theirs[k].paid)
    if len(paid) > 1 and len(pays) == 1 and len(set(theirs_pays)) > 1:
        return (
            f"on seed {sp.seed} every miss of the answer is paid {mine.pay:g} whatever it is,"
            f" more than max_miss_credit {c:g} (nearly a win), where {parent!r}, which it"
            f" varies, pays them {theirs_pays[0]:g} to {theirs_pays[-1]:g}"
        )
    return (
        f"on seed {sp.seed} {sp.plays[i].label} is paid {mine.pay:g} ({mine.shown}), more than"
        f" {parent!r}, which it varies, pays it ({theirs.pay:g}) and than max_miss_credit {c:g}"
    )


def _check_idle(seeds: Sequence[SeedPlays], parent: str | None) -> int:
    """No idle play paid above its bar (see the module); the plays compared."""
    compared = 0
    for sp in seeds:
        best = sp.best_miss()
        parent_pays_misses = sp.theirs is not None and any(
            sp.theirs[i].pay > EPS for i in sp.misses()
        )
        for k, (play, mine) in enumerate(_pairs(sp)):
            if play.miss or not mine.ended or (play.own and mine.won):
                continue
            bars: list[tuple[float, str]] = []
            if sp.theirs is not None:
                t = sp.theirs[k]
                bars.append((t.pay if t.ended else 0.0, f"{parent!r}, which it varies, pays it"))
            if play.rung is not None and (contained := sp.rung_pay(play.rung)) is not None:
                bars.append((contained, "it pays the miss it contains played out"))
            if best is not None and not parent_pays_misses:
                bars.append((best, "it pays its best-paid miss on that seed"))
            if not bars:
                continue  # no miss to measure it by, and no parent: an answer without digits
            compared += 1
            bar, what = max(bars)
            if mine.pay > bar + EPS:
                raise _perverse(
                    f"a play that makes no progress is paid: on seed {sp.seed} {play.label} pays"
                    f" {mine.pay:g} ({mine.shown}), more than {what} ({bar:g})"
                )
    return compared


def credit_seeds(cfg: VerifyConfig) -> list[int]:
    """The seeds the misses are played on: ``credit_seeds`` of them from ``seed`` on."""
    return [(cfg.seed + i) % 2**32 for i in range(cfg.credit_seeds)]


def _open_parent(ctx: Context) -> tuple[JailedSession | None, dict[int, list[str]], str]:
    """The parent's started session and its solution on each credit seed, or None and why."""
    parent, cfg = ctx.parent, ctx.config
    if parent is None:
        return None, {}, "no parent"
    session, note = open_reference(parent, ctx.policy, cfg.max_turns)
    if session is None:
        return None, {}, note
    solutions = {}
    try:
        for seed in credit_seeds(cfg):
            session.reset(seed)
            solutions[seed] = session.solution()
    except EnvFailure as exc:  # the parent broke: it defines nothing, and is not our failure
        session.close()
        return None, {}, f"its parent {parent.name!r} failed ({exc.failure.kind})"
    return session, solutions, ""


def _play_all(
    session: JailedSession, plays: dict[int, list[Play]], cfg: VerifyConfig
) -> dict[int, list[Outcome]]:
    return {seed: [played(session, seed, p, cfg) for p in ps] for seed, ps in plays.items()}


def _design_plays(ctx: Context, seed: int, parents: list[str] | None) -> tuple[SeedPlays, bool]:
    """The design's plays on ``seed``: the parent's (``parents``, its solution there) when
    that solution wins the design, else its own; and whether they were the parent's."""
    cfg, session = ctx.config, ctx.session
    # the parent's misses are the design's only where the parent's answer wins the design: one
    # that hides another answer (the same game over another range) would be played guesses
    # unrelated to its answer, whose order means nothing
    paired = parents is not None and wins(session, seed, parents, cfg)
    solution = parents if paired else ctx.seed_solutions.get(seed)
    if solution is None:
        session.reset(seed)
        solution = session.solution()
    plays = plays_of(solution, cfg.garbage_actions, idle=seed == cfg.seed)
    return SeedPlays(seed, plays, [played(session, seed, p, cfg) for p in plays]), paired


def _seed_plays(ctx: Context) -> tuple[list[SeedPlays], str]:
    """Each credit seed's plays (:func:`_design_plays`), with the parent's outcomes where they
    are the parent's."""
    cfg = ctx.config
    parent, solutions, note = _open_parent(ctx)
    theirs: dict[int, list[Outcome]] = {}
    if parent is not None:
        plays = {
            s: plays_of(sol, cfg.garbage_actions, s == cfg.seed) for s, sol in solutions.items()
        }
        try:
            theirs = _play_all(parent, plays, cfg)
        except EnvFailure as exc:  # as when it does not load: it defines nothing
            assert ctx.parent is not None
            solutions, note = {}, f"its parent {ctx.parent.name!r} failed ({exc.failure.kind})"
        finally:
            parent.close()
    mine = [_design_plays(ctx, s, solutions.get(s)) for s in credit_seeds(cfg)]
    for sp, paired in mine:
        sp.theirs = theirs[sp.seed] if paired else None
    if solutions and ctx.parent is not None and not any(paired for _, paired in mine):
        note = f"the answers of {ctx.parent.name!r}, which it varies, do not win it"
    return [sp for sp, _ in mine], note


def check_perverse_credit(ctx: Context) -> str:
    """The credit rule rewards the goal (see the module)."""
    seeds, note = _seed_plays(ctx)
    judged = _check_range_and_best(ctx, seeds)
    name = ctx.parent.name if ctx.parent is not None else None
    _check_wins(seeds, name)
    paired = [sp for sp in seeds if sp.theirs is not None]
    pairs = _check_reversals(seeds, name) if paired and name else 0
    misses = _check_miss_pay(seeds, name, ctx.config)
    _check_flat(seeds, name)
    idle = _check_idle(seeds, name)
    head = f"{judged} plays end in [0, 1], none above the solution's"
    if paired:
        return (
            f"{head}; as {name!r}, which it varies, on {len(paired)} of {len(seeds)} seeds: no"
            f" miss wins that it does not, no closer miss scores below a farther one ({pairs}"
            f" pairs), no miss paid above its pay or {ctx.config.max_miss_credit:g} ({misses}"
            f" misses), no idle play paid above its pay ({idle} plays)"
        )
    return (
        f"{head}; {note or 'no parent'} (closeness not judged): no miss wins, not every miss paid"
        f" above {ctx.config.max_miss_credit:g} ({misses} misses), no idle play paid above the"
        f" best-paid miss ({idle} plays)"
    )


def _perverse(reason: str) -> EnvFailure:
    return EnvFailure(Failure(FailureKind.PERVERSE_CREDIT, reason), fatal=False)
