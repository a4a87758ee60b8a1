"""The ``leaks_answer`` check: a game whose observations give the answer away is no game.

``feasibility``, ``non_triviality`` and ``informative`` play scripted and random moves; none of
them reads what it is told. A clue that names the hidden number (the 0.5B coder's
``number_hunt`` clue "... I thought it was around around {self.number}"), or gives it in another
form (its digits reversed, the number plus 17, in hex or in words, its digits listed, an anagram
of the hidden word, a sum and a product that pin it down), passes them all: the solution wins,
random play loses, and the seeds look different. This check plays *learning readers*
(:mod:`spade.verify.readers`).

A reader sees what the agent sees: the task text, the tool schemas of a tool-use design (the
agent is shown them; the reset/step info dicts it is not), and the answer to at most one probing
move, the same on every seed: an example move the task text shows, a move no game understands,
or one of the config seed's first solution moves with the words it took from the task text
replaced by the words found there on the seed (``get_order(ORD-5123)`` becomes the seed's own
order). On ``sandbox.verify.leak_fit_seeds`` seeds (after the leak seeds) the readers learn, from
what they saw and the answer (the last move of that seed's ``solution()``), a simple function
that gives the answer; then each is played, knowing nothing of the hidden state, on the
``sandbox.verify.leak_seeds`` seeds it never saw, submitting its answer after its probe. A
reader of the task text alone also plays the config seed's solution moves before the answer,
so adapted, without reading their answers: a task whose text gives the answer and dictates the
actions is won so. A reader that wins all seeds but one in eight (7 of 8) leaks the answer,
unless the design varies a parent (the most similar reference, at least
:data:`~spade.verify.novelty.VARIANT_SIMILARITY` by source) whose readers win too: the leak is
then the parent's, not the design's. Fitting on some seeds and playing on others keeps a
coincidence from counting: a value that gives the answer by chance on the fit seeds does not on
the others, and a fair multiple-choice game whose answer is one of k listed words is won by a
guess on 7 seeds of 8 with chance under 0.3% (k = 3).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from spade.envs.actions import extract_all_boxed
from spade.records import Failure, FailureKind
from spade.sandbox.failures import EnvFailure
from spade.sandbox.session import JailedSession
from spade.verify.episodes import WORD, check_reward, clip
from spade.verify.novelty import open_reference
from spade.verify.places import SCHEMAS, TASK, Locator, features
from spade.verify.readers import Reader, fit, needed

if TYPE_CHECKING:
    from spade.verify.checks import Context

MAX_EXAMPLES = 3
"""Example moves of the task text a reader may probe with (the first ones)."""
SOLUTION_PROBES = 2
"""First moves of the config seed's solution a reader may probe with (never its last, unless
it is the only one)."""
MAX_READERS = 6
"""Fitted readers played on the held-out seeds, the simplest first."""
INVALID = {False: "\\boxed{?}", True: '<tool_call>{"name": "help", "arguments": {}}</tool_call>'}
"""A probe no game understands (its answer may say more than it should), by tool use."""
PREFIX = "the solution's moves before its answer"
"""The unread probe: a reader plays them (with the seed's words) before its answer."""
_TOOL_CALL = re.compile(r"<tool_call>.{1,400}?</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class Probe:
    """Probing moves, the same rule on every seed: the task text's i-th example move, or
    solution moves of the config seed whose words from its task text are taken from the seed's
    own task text. A reader reads the answer to a probe of one move; it does not read the
    answers to the solution's moves before its answer (``read`` False: a game played so gives
    away only what its task text says)."""

    label: str
    example: int | None = None
    moves: tuple[str, ...] = ()
    taken: tuple[tuple[str, Locator], ...] = ()
    read: bool = True

    def on(self, task: str, seen: dict[Locator, str]) -> tuple[str, ...] | None:
        """The moves on a seed whose task text is ``task`` (None: it shows no such example)."""
        if self.example is not None:
            found = [*extract_all_boxed(task), *_TOOL_CALL.findall(task)]
            if self.example >= len(found):
                return None
            move = found[self.example]
            return (move if move.startswith("<tool_call>") else "\\boxed{" + move.strip() + "}",)
        swap = {word: seen[loc] for word, loc in self.taken if loc in seen}
        return tuple(WORD.sub(lambda m: swap.get(m.group(), m.group()), m) for m in self.moves)


def solution_probes(solution: Sequence[str], task: str, other: str) -> list[Probe]:
    """The config seed's first solution moves as probes, and all its moves before its answer
    as an unread prefix: a word of a move that its task text shows and another seed's does not
    is read where it stands in the task text."""
    mine = features(TASK, task)
    theirs = set(WORD.findall(other))
    taken = []
    for word in dict.fromkeys(WORD.findall(" ".join(solution))):
        locs = [loc for loc, v in mine.items() if v == word and loc[1] == "word"]
        locs.sort(key=lambda loc: (not loc[2].startswith("after"), len(loc[2])))
        if locs and word not in theirs:
            taken.append((word, locs[0]))
    ordinal = ("first", "second", "third")
    probes = [
        Probe(f"the {ordinal[i]} move of the solution", moves=(move,), taken=tuple(taken))
        for i, move in enumerate(solution[: max(1, min(SOLUTION_PROBES, len(solution) - 1))])
    ]
    if len(solution) > 2:  # (one move before the answer is a probe already)
        before = tuple(solution[:-1])
        probes.append(Probe(PREFIX, moves=before, taken=tuple(taken), read=False))
    return probes


@dataclass
class Sight:
    """What a reader sees on one seed: values by place and the words of its texts."""

    task: str
    seen: dict[Locator, str] = field(default_factory=dict)
    words: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    moves: dict[str, tuple[str, ...] | None] = field(default_factory=dict)

    def add(self, place: str, text: str) -> None:
        self.seen |= features(place, text)
        self.words += WORD.findall(text)
        self.texts[place] = text


@dataclass
class Reading:
    """How the readers fared on a design: the best reader, its wins and what it did on the
    first seed it won."""

    seeds: int
    readers: int = 0
    rule: str = ""
    wins: int = 0
    example: str = ""
    note: str = ""

    def leaks(self) -> bool:
        return self.wins >= needed(self.seeds) and self.seeds > 0


class _Player:
    """Plays one session: observes seeds and plays readers' moves, each episode once."""

    def __init__(
        self,
        session: JailedSession,
        tool_use: bool,
        threshold: float,
        reward_range: tuple[float, float],
    ) -> None:
        self.session, self.tool_use = session, tool_use
        self.threshold, self.reward_range = threshold, reward_range
        self.sights: dict[int, Sight] = {}
        self.played: dict[tuple[int, str | None, str], bool] = {}

    def step(self, move: str) -> tuple[str, bool, bool]:
        obs, reward, terminated, truncated, _ = self.session.step(move)
        check_reward(reward, *self.reward_range)
        return obs, terminated and reward >= self.threshold, terminated or truncated

    def sight(self, seed: int) -> Sight:
        if seed not in self.sights:
            task, _ = self.session.reset(seed)
            sight = self.sights[seed] = Sight(task)
            sight.add(TASK, task)
            if self.tool_use:  # the agent is shown the schemas too (system prompt and template)
                sight.add(SCHEMAS, json.dumps(self.session.tools(), sort_keys=True))
        return self.sights[seed]

    def probe(self, seed: int, probe: Probe) -> Sight:
        """What a reader sees on ``seed`` with the answer to ``probe`` (if it is read)."""
        sight = self.sight(seed)
        if probe.label not in sight.moves:
            moves = sight.moves[probe.label] = probe.on(sight.task, sight.seen)
            if moves and probe.read:
                self.session.reset(seed)
                obs, _, ended = self.step(moves[0])
                if not ended:
                    sight.add(probe.label, obs)
        return sight

    def wins(self, seed: int, probe: str | None, move: str) -> bool:
        """Whether ``move`` wins seed ``seed`` (after the probe labelled ``probe``, if any)."""
        key = (seed, probe, move)
        if key not in self.played:
            self.session.reset(seed)
            before = self.sights[seed].moves.get(probe) if probe else ()
            # no probe on this seed, or it ended the episode: lost
            self.played[key] = before is not None and not any(self.step(m)[2] for m in before)
            self.played[key] = self.played[key] and self.step(move)[1]
        return self.played[key]


def read(
    session: JailedSession,
    seeds: Sequence[int],
    fit_seeds: Sequence[int],
    solution: Sequence[str],
    *,
    tool_use: bool,
    threshold: float,
    reward_range: tuple[float, float],
) -> Reading:
    """Fit readers on ``fit_seeds`` and play them on ``seeds`` in ``session`` (``solution``:
    the moves of the first seed's instance)."""
    player = _Player(session, tool_use, threshold, reward_range)
    reading = Reading(len(seeds))
    if not seeds or len(fit_seeds) < 2:
        reading.note = "too few seeds to fit on"
        return reading
    answers = []
    for seed in fit_seeds:
        player.sight(seed)
        moves = session.solution()
        answers.append(moves[-1] if moves else None)
    first = player.sight(seeds[0]).task
    probes = [Probe(f"the task's example move {i + 1}", example=i) for i in range(MAX_EXAMPLES)]
    probes.append(Probe("a move the game does not understand", moves=(INVALID[tool_use],)))
    probes += solution_probes(solution, first, player.sights[fit_seeds[0]].task)
    sights = [player.sight(s) for s in fit_seeds]
    for seed in fit_seeds:
        for probe in probes:
            player.probe(seed, probe)
    readable = [p.label for p in probes if p.read]
    words = [s.words for s in sights]
    readers, reading.note = fit([s.seen for s in sights], answers, words, readable, MAX_READERS)
    if any(p.label == PREFIX for p in probes):  # the task text's readers, after the actions
        readers += [replace(r, probe=PREFIX) for r in readers if r.probe is None][:2]
    reading.readers = len(readers)
    by_label = {p.label: p for p in probes}
    allowed = len(seeds) - needed(len(seeds))
    for reader in readers:
        wins, example = 0, ""
        for index, seed in enumerate(seeds):
            sight = (
                player.probe(seed, by_label[reader.probe]) if reader.probe else player.sight(seed)
            )
            move = reader.move(sight.seen, sight.words)
            if move is not None and player.wins(seed, reader.probe, move):
                wins += 1
                example = example or _example(seed, move, reader, sight)
            elif index + 1 - wins > allowed:
                break
        if wins > reading.wins:
            rule = reader.describe()
            if reader.probe == PREFIX:
                rule += f", after {PREFIX} with the seed's words"
            reading.rule, reading.wins, reading.example = rule, wins, example
        if reading.leaks():
            break
    return reading


def _example(seed: int, move: str, reader: Reader, sight: Sight) -> str:
    values = ", ".join(clip(v, 40) for v in dict.fromkeys(reader.read(sight.seen)))
    if reader.probe == PREFIX:
        played = sight.moves.get(PREFIX) or ()
        return f"on seed {seed} it read {values}, played {len(played)} moves, submitted {move!r}"
    if reader.probe:
        probe = (sight.moves.get(reader.probe) or ("",))[0]
        answer = clip(sight.texts.get(reader.probe, ""), 120)
        return (
            f"on seed {seed} it read {values} in the answer {answer} to {probe!r} and"
            f" submitted {move!r}"
        )
    return f"on seed {seed} it read {values} and submitted {move!r}"


def check_leaks_answer(ctx: Context) -> str:
    """No reader fitted to the answer on some seeds wins most others, unless the design's
    parent is won that way too (see the module)."""
    cfg = ctx.config
    seeds = [(cfg.seed + i) % 2**32 for i in range(cfg.leak_seeds)]
    if not seeds:
        return "not checked (sandbox.verify.leak_seeds is 0)"
    fit_seeds = [(cfg.seed + len(seeds) + i) % 2**32 for i in range(cfg.leak_fit_seeds)]
    assert ctx.info is not None
    info = ctx.info

    def reading(session: JailedSession, solution: Sequence[str]) -> Reading:
        return read(
            session, seeds, fit_seeds, solution, tool_use=info.tool_use,
            threshold=cfg.success_threshold, reward_range=(cfg.reward_min, cfg.reward_max),
        )  # fmt: skip

    mine = reading(ctx.session, ctx.solution)
    n = len(seeds)
    if not mine.leaks():
        return (
            f"no reader wins more than {mine.wins} of {n} seeds ({mine.readers} readers fitted"
            f" on {len(fit_seeds)} other seeds to the answer from the task text or the answer"
            f" to one probe: {mine.note})"
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
            f"a reader wins {mine.wins} of {n} seeds by submitting"
            f" {mine.rule}: {mine.example}" + (f"; {note}" if note else ""),
        ),
        fatal=False,
    )
