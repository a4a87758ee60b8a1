"""The ``seed_dependence`` check: different seeds must be different instances.

A design whose every seed has one solution is one instance, whatever its first observations
say: the same moves win every seed, so nothing the opening says needs reading (a quiz with one
answer, a secret that ignores the seed, one answer behind an opening whose text varies). A
design whose solutions differ by seed while one seed's solution wins them all hides nothing that
decides the game either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spade.records import Failure, FailureKind
from spade.sandbox.failures import EnvFailure
from spade.verify.episodes import play, scripted

if TYPE_CHECKING:
    from spade.verify.checks import Context


def _independent(reason: str) -> EnvFailure:
    return EnvFailure(Failure(FailureKind.SEED_INDEPENDENT, reason), fatal=False)


def _clip(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_seed_dependence(ctx: Context) -> str:
    """Different seeds must give different instances: a different solution for at least one
    of the probe seeds (one solution on every seed is one instance, whatever the first
    observations say: :func:`_one_solution_everywhere`), and no seed's solution winning them
    all."""
    cfg, session = ctx.config, ctx.session
    if cfg.seed_probe_count == 0:
        ctx.seed_solutions = {cfg.seed: ctx.solution}
        return "not checked (sandbox.verify.seed_probe_count is 0)"
    firsts: dict[int, str] = {}
    for seed in cfg.probe_seeds:
        firsts[seed], _ = session.reset(seed)
        ctx.seed_solutions[seed] = session.solution()
    observations = len(set(firsts.values()))
    solutions = len({tuple(s) for s in ctx.seed_solutions.values()})
    seeds = ", ".join(map(str, firsts))
    # one answer behind varied text is one instance too: the same moves win every seed, so
    # nothing the opening says needs reading (a few seeds can share a solution by chance in a
    # game of few answers: more are drawn before judging)
    if solutions == 1 and _one_solution_everywhere(ctx):
        if observations == 1:
            raise _independent(
                f"seeds {seeds} all give the same first observation "
                f"{_clip(firsts[cfg.seed])} and the same solution {_clip(ctx.solution)}",
            )
        raise _independent(
            f"seeds {cfg.seed} to {cfg.seed + SOLUTION_SEEDS - 1} all have the same solution"
            f" {_clip(ctx.solution)} ({observations} distinct first observations of"
            f" {len(firsts)} probed): one instance, whatever the text around it",
        )
    others = [seed for seed in firsts if seed != cfg.seed]
    # solutions that differ by instance, yet one instance's wins them all: the difference is
    # decoration (a fixed answer with a varied first observation is judged above, and passes)
    if solutions > 1 and ctx.solution and all(_solution_wins(ctx, seed) for seed in others):
        raise _independent(
            f"the solution of seed {cfg.seed} {_clip(ctx.solution)} wins seeds"
            f" {', '.join(map(str, others))} too: what an instance hides does not decide it",
        )
    n = len(firsts)
    return (
        f"seeds {seeds}: distinct first observations {observations} of {n}, "
        f"distinct solutions {solutions} of {n}; seed {cfg.seed}'s solution does not win them all"
    )


SOLUTION_SEEDS = 16
"""Seeds whose ``solution()`` is read before a solution shared by every probe seed is judged one
fixed instance: a fair game of three answers shows one answer on 3 seeds with chance 1/9, on 16
with chance 3**-15. A reset and a ``solution()`` call each: milliseconds in the jail."""


def _one_solution_everywhere(ctx: Context) -> bool:
    """Whether ``solution()`` is the same on :data:`SOLUTION_SEEDS` seeds from the config's."""
    session, seed = ctx.session, ctx.config.seed
    for extra in range(SOLUTION_SEEDS):
        if (s := (seed + extra) % 2**32) in ctx.seed_solutions:
            continue
        session.reset(s)
        if session.solution() != ctx.solution:
            return False
    return True


def _solution_wins(ctx: Context, seed: int) -> bool:
    """Whether the solution of ``config.seed`` played on ``seed`` reaches the goal (a game
    whose win does not depend on its hidden state: the 0.5B coder's ``play`` that wins on
    ``f(2)`` whatever the polynomial, with a ``solution()`` that names the coefficients and
    ends with it)."""
    cfg = ctx.config
    episode = play(
        ctx.session,
        seed,
        scripted(ctx.solution),
        max_steps=len(ctx.solution),
        reward_range=(cfg.reward_min, cfg.reward_max),
    )
    return episode.terminated and episode.succeeded(cfg.success_threshold)
