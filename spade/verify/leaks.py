"""The ``leaks_answer`` check: a game whose observations print the answer is no game.

``feasibility``, ``non_triviality`` and ``informative`` play scripted and random moves; none of
them reads what it is told. A clue that names the hidden number (the 0.5B coder's
``number_hunt`` clue "... I thought it was around around {self.number}") or the hidden
polynomial (``polynomial_probe``'s "Well done, {self.coeffs}.") passes them all: the solution
wins, random play loses, and the seeds look different. This check plays *readers*. A reader
makes at most one probing move (an example move the task text shows, or the config seed's first
solution move: the same move on every seed), then submits one value it finds in the last
observation, chosen by a fixed rule: the i-th number, quoted string, boxed token or short word
from the start or from the end, the one after a given word, or a run of numbers filling the
design's answer (``answer 3, -2, 5, 1``). It knows nothing of the hidden state and plays every
seed alike. The value is written as the design's answers are (the config seed's last solution
move: ``\\boxed{...}`` or ``<answer>...</answer>``).

A reader that wins within two moves on all ``sandbox.verify.leak_seeds`` seeds but one in eight
(7 of 8) leaks the answer, unless the design varies a parent (the most similar reference, at least
:data:`~spade.verify.novelty.VARIANT_SIMILARITY` by source) that readers win too: the leak is then
the parent's, not the design's. The bar is high on purpose: a fair multiple-choice game whose answer
is one of k listed words is won by a positional reader on a seed with chance 1/k, so a reader that
wins 7 seeds of 8 by luck is rare (k = 3: under 0.3% per reader), while a clue that prints the
answer is read on every seed.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spade.envs.actions import extract_all_boxed
from spade.records import Failure, FailureKind
from spade.sandbox.failures import EnvFailure
from spade.sandbox.session import JailedSession
from spade.verify.episodes import NUMBER, WORD, check_reward
from spade.verify.novelty import open_reference

if TYPE_CHECKING:
    from spade.verify.checks import Context

QUOTED = re.compile(r"\"([^\"\n]{1,40})\"|'([^'\n]{1,40})'|`([^`\n]{1,40})`")
BOXED = re.compile(r"\\boxed\{([^{}\n]{1,80})\}")
MAX_EXAMPLES = 3
"""Example moves of the task text a reader may probe with (the first ones)."""
MAX_TEXT = 4000
"""Characters of an observation a reader reads (the first ones)."""


@dataclass(frozen=True)
class AnswerForm:
    """How the design writes an answer, taken from one solution's last move: the wrapper
    (``\\boxed{}`` or ``<answer></answer>``) and where its numbers stand."""

    move: str
    tool_use: bool

    @property
    def numbers(self) -> list[re.Match[str]]:
        return list(NUMBER.finditer(self.move))

    def plain(self, value: str) -> str:
        """``value`` as the design's answer move."""
        if "<answer>" in self.move or (self.tool_use and "\\boxed{" not in self.move):
            return f"<answer>{value}</answer>"
        return "\\boxed{" + value + "}"

    def filled(self, values: Sequence[str]) -> str:
        """The answer move with its numbers replaced by ``values``, in order."""
        out, last = [], 0
        for match, value in zip(self.numbers, values, strict=True):
            out += [self.move[last : match.start()], value]
            last = match.end()
        return "".join(out) + self.move[last:]


def readings(text: str, form: AnswerForm) -> dict[str, str]:
    """The moves the readers submit after seeing ``text``, by reader rule: for each kind of
    value (numbers, boxed tokens, quoted strings, short words, runs of numbers filling the
    answer), its i-th from the start, from the end, and the one after a given word."""
    text = text[:MAX_TEXT]
    words = list(WORD.finditer(text))
    ends = [w.end() for w in words]

    def before(pos: int) -> str:
        i = bisect.bisect_right(ends, pos) - 1
        return repr(words[i].group().lower()) if i >= 0 else "nothing"

    kinds: dict[str, list[tuple[str, int]]] = {
        "number": [(m.group(), m.start()) for m in NUMBER.finditer(text)],
        "boxed token": [(m.group(1).strip(), m.start()) for m in BOXED.finditer(text)],
        "quoted string": [
            (next(g for g in m.groups() if g is not None).strip(), m.start())
            for m in QUOTED.finditer(text)
        ],
        "word": [(w.group(), w.start()) for w in words],
    }
    rules: dict[str, str] = {}

    def add(kind: str, found: list[tuple[str, int]], move_of: dict[int, str]) -> None:
        for i, (_, pos) in enumerate(found):
            move = move_of[i]
            for rule in (
                f"{kind} #{i + 1}",
                f"{kind} #{i - len(found)}",
                f"{kind} after {before(pos)}",
            ):
                rules.setdefault(rule, move)

    for kind, found in kinds.items():
        found = [(v, p) for v, p in found if v]
        add(kind, found, {i: form.plain(v) for i, (v, _) in enumerate(found)})
    k, numbers = len(form.numbers), kinds["number"]
    if k and not (k == 1 and form.move.strip() == form.plain(form.numbers[0].group())):
        runs = [numbers[i : i + k] for i in range(len(numbers) - k + 1)]
        add(
            f"run of {k} numbers",
            [run[0] for run in runs],
            {i: form.filled([v for v, _ in run]) for i, run in enumerate(runs)},
        )
    return rules


@dataclass
class Reading:
    """How the readers fared on a design: the best reader's rule, its wins, and what it did on
    the first seed it won."""

    seeds: int
    readers: int = 0
    rule: str = ""
    wins: int = 0
    example: str = ""

    def leaks(self) -> bool:
        return self.wins >= needed(self.seeds) and self.seeds > 0


def needed(seeds: int) -> int:
    """Seeds a reader must win to leak: all but one in eight (7 of 8, 4 of 4)."""
    return seeds - seeds // 8


def read(
    session: JailedSession,
    seeds: Sequence[int],
    solution: Sequence[str],
    *,
    tool_use: bool,
    threshold: float,
    reward_range: tuple[float, float],
) -> Reading:
    """Play every reader on ``seeds`` in ``session`` (``solution``: the moves of the first
    seed's instance; its first move is a probe, its last the answer's form). Readers are
    dropped once they lost more seeds than a leak allows."""
    form = AnswerForm(solution[-1] if solution else "\\boxed{0}", tool_use)
    allowed = len(seeds) // 8
    losses: dict[tuple[str, str], int] = {}
    wins: dict[tuple[str, str], int] = {}
    examples: dict[tuple[str, str], str] = {}

    def step(move: str) -> tuple[str, bool, bool]:
        obs, reward, terminated, truncated, _ = session.step(move)
        check_reward(reward, *reward_range)
        return obs, terminated and reward >= threshold, terminated or truncated

    for index, seed in enumerate(seeds):
        first, _ = session.reset(seed)
        probes = [
            (f"the task's example move {i + 1}", "\\boxed{" + ex.strip() + "}")
            for i, ex in enumerate(extract_all_boxed(first[:MAX_TEXT])[:MAX_EXAMPLES])
        ]
        if solution:
            probes.append(("the first move of the first seed's solution", solution[0]))
        seen: list[tuple[str, str | None, str]] = [("the task text", None, first)]
        for label, probe in probes:
            session.reset(seed)
            obs, _, ended = step(probe)
            if not ended:
                seen.append((f"the answer to {label} {probe!r}", probe, obs))
        rules = {
            (where, rule): (probe, move, text)
            for where, probe, text in seen
            for rule, move in readings(text, form).items()
        }
        if index <= allowed:
            for key in rules:
                if key not in losses:
                    losses[key], wins[key] = index, 0
        tested: dict[tuple[str | None, str], bool] = {}
        for key in [k for k, lost in losses.items() if lost <= allowed]:
            if key not in rules:
                losses[key] += 1
                continue
            before, move, text = rules[key]
            if (before, move) not in tested:
                session.reset(seed)
                won = False
                if before is None or not step(before)[2]:
                    won = step(move)[1]
                tested[(before, move)] = won
            if tested[(before, move)]:
                wins[key] += 1
                examples.setdefault(
                    key, f"on seed {seed} it read {move!r} in {key[0]}: {_clip(text)}"
                )
            else:
                losses[key] += 1
    reading = Reading(len(seeds), readers=len(losses))
    if wins:
        key = max(wins, key=lambda k: (wins[k], -losses[k]))
        reading.rule, reading.wins = f"{key[1]} of {key[0]}", wins[key]
        reading.example = examples.get(key, "")
    return reading


def _clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def check_leaks_answer(ctx: Context) -> str:
    """No reader of observations wins most seeds within two moves, unless the design's parent
    is won that way too (see the module)."""
    cfg = ctx.config
    seeds = [(cfg.seed + i) % 2**32 for i in range(cfg.leak_seeds)]
    if not seeds:
        return "not checked (sandbox.verify.leak_seeds is 0)"
    assert ctx.info is not None
    info = ctx.info

    def reading(session: JailedSession, solution: Sequence[str]) -> Reading:
        return read(
            session, seeds, solution, tool_use=info.tool_use, threshold=cfg.success_threshold,
            reward_range=(cfg.reward_min, cfg.reward_max),
        )  # fmt: skip

    mine = reading(ctx.session, ctx.solution)
    n = len(seeds)
    if not mine.leaks():
        return (
            f"no reader wins more than {mine.wins} of {n} seeds within two moves"
            f" ({mine.readers} readers: values of the task text or of the answer to one probe)"
        )
    parent, note = ctx.parent, ""
    if parent is not None:
        session, note = open_reference(parent, ctx.policy, cfg.max_turns)
        if session is not None:
            try:
                session.reset(cfg.seed)
                theirs = reading(session, session.solution())
            except EnvFailure as exc:  # the parent broke: it is not read, and says nothing
                theirs, note = Reading(n), f"its parent failed ({exc.failure.kind})"
            finally:
                session.close()
            if theirs.leaks():
                return (
                    f"a reader wins {mine.wins} of {n} seeds ({mine.rule}), as in"
                    f" {parent.name!r}, which it varies ({theirs.rule}, {theirs.wins} of {n}):"
                    " the leak is the parent's"
                )
            note = note or f"in {parent.name!r}, which it varies, readers win at most {theirs.wins}"
    raise EnvFailure(
        Failure(
            FailureKind.LEAKS_ANSWER,
            f"a reader wins {mine.wins} of {n} seeds within two moves by submitting the"
            f" {mine.rule}: {mine.example}" + (f"; {note}" if note else ""),
        ),
        fatal=False,
    )
