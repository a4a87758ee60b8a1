"""The verifier's named checks, in the order they run.

Each check takes the shared :class:`Context` and returns a one-line reason when it passes;
it fails by raising :class:`EnvFailure` (from the sandbox or its own judgement). Checks
after the first failure are not run: each builds on what the earlier ones established.
"""

from __future__ import annotations

import ast
import functools
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spade.config import VerifyConfig
from spade.records import Failure, FailureKind
from spade.sandbox.failures import EnvFailure
from spade.sandbox.policy import SandboxPolicy
from spade.sandbox.replies import SessionInfo
from spade.sandbox.session import JailedSession
from spade.verify.credit import check_perverse_credit
from spade.verify.episodes import Episode, check_reward, play, random_policy, scripted
from spade.verify.informative import check_informative
from spade.verify.instances import check_seed_dependence
from spade.verify.leaks import check_leaks_answer
from spade.verify.novelty import (
    Comparison,
    Reference,
    literal_edits_only,
    open_reference,
    rank_references,
    reference_sizes,
    same_game,
    sizes_text,
    source_tokens,
    variant_parent,
)
from spade.verify.probes import Plan, more_plans, plans
from spade.verify.static import import_violations, module_table, name_violations, parse_source
from spade.verify.winnable import check_winnable


@dataclass
class Context:
    """What the checks share: the code, settings, the sessions and what was learned."""

    code: str
    config: VerifyConfig
    policy: SandboxPolicy
    sessions: list[JailedSession] = field(default_factory=list)
    tree: ast.Module | None = None
    info: SessionInfo | None = None
    solution: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    replay: Episode | None = None
    empty_play: Episode | None = None
    references: Sequence[Reference] = ()
    seed_solutions: dict[int, list[str]] = field(default_factory=dict)  # seed -> solution()
    similarity: float | None = None  # source similarity of the closest reference
    _parent: tuple[Reference | None] | None = field(default=None, repr=False)

    @property
    def parent(self) -> Reference | None:
        """The reference the design varies, if any (:func:`variant_parent`), found once."""
        if self._parent is None:
            found = variant_parent(self.code, self.references, self.config.similarity_max_tokens)
            self._parent = (found,)
        return self._parent[0]

    def new_session(self, **env_kwargs: Any) -> JailedSession:
        """A started session of the design (``env_kwargs`` beyond the verifier's max_turns go
        to its constructor); closed with the others when the verifier is done."""
        session = JailedSession(
            self.code,
            policy=self.policy,
            env_kwargs={"max_turns": self.config.max_turns, **env_kwargs},
            reward_range=(self.config.reward_min, self.config.reward_max),
        )
        self.sessions.append(session)
        session.start()
        return session

    @property
    def tool_names(self) -> list[str]:
        return [str(t.get("function", {}).get("name", "")) for t in self.tools]

    @property
    def session(self) -> JailedSession:
        return self.sessions[0]

    def play(self, session: JailedSession, policy: Callable[[int, str], str]) -> Episode:
        cfg = self.config
        return play(
            session,
            cfg.seed,
            policy,
            max_steps=cfg.max_turns,
            reward_range=(cfg.reward_min, cfg.reward_max),
        )

    def close(self) -> None:
        for session in self.sessions:
            session.close()


def _fail(kind: FailureKind, reason: str) -> EnvFailure:
    return EnvFailure(Failure(kind, reason), fatal=False)


def check_parse(ctx: Context) -> str:
    result = parse_source(ctx.code, ctx.config.max_code_bytes)
    if isinstance(result, Failure):
        raise EnvFailure(result, fatal=False)
    ctx.tree = result
    return f"{len(ctx.code.splitlines())} lines parse"


def check_import_policy(ctx: Context) -> str:
    assert ctx.tree is not None
    if bad := import_violations(ctx.tree, ctx.policy.imports, module_table(ctx.policy)):
        raise _fail(FailureKind.IMPORT_DENIED, "imports outside the allow-list: " + "; ".join(bad))
    if bad := name_violations(ctx.tree, ctx.policy.imports):
        raise _fail(FailureKind.POLICY_DENIED, "forbidden: " + "; ".join(bad))
    return "imports and names within policy"


def check_class_found(ctx: Context) -> str:
    session = ctx.new_session()
    ctx.info = session.info
    assert ctx.info is not None
    kind = "tool use" if ctx.info.tool_use else "game"
    return f"{ctx.info.class_name} loads ({kind}) in {session.stats.start_s * 1000:.0f} ms"


def check_tool_schemas(ctx: Context) -> str:
    """A tool-use design's ``tools()`` are OpenAI function schemas whose parameters are valid
    JSON Schema (:mod:`spade.sandbox.schemas`, the ``jsonschema`` library's metaschema check);
    the session checks every later ``tools`` reply the same way."""
    assert ctx.info is not None
    if not ctx.info.tool_use:
        return "not a tool-use design"
    ctx.tools = ctx.session.tools()  # raises contract with the reason when a schema is bad
    names = ", ".join(ctx.tool_names)
    return f"{len(ctx.tools)} tool schemas are valid JSON Schema ({names[:120]})"


def check_reset_contract(ctx: Context) -> str:
    obs, _ = ctx.session.reset(None)
    obs, _ = ctx.session.reset(ctx.config.seed)
    if not obs.strip():
        raise _fail(FailureKind.CONTRACT, "reset() returned an empty observation")
    hinted, _ = ctx.session.reset(ctx.config.seed, hint="probe")
    if not hinted.startswith(obs):
        raise _fail(
            FailureKind.NONDETERMINISTIC, "reset() with the same seed gave another observation"
        )
    return f"reset(seed) -> (str[{len(obs)}], dict)"


def check_step_contract(ctx: Context) -> str:
    ctx.session.reset(ctx.config.seed)
    ctx.solution = ctx.session.solution()
    if not ctx.solution:
        raise _fail(FailureKind.CONTRACT, "solution() returned no actions")
    ctx.replay = ctx.play(ctx.session, scripted(ctx.solution))
    return f"{len(ctx.replay.steps)} steps returned valid 5-tuples with rewards in range"


_BAD_ARGUMENTS: list[Any] = [None, -(10**30), "x" * 500, [], {"nested": [1]}, float("inf")]


def bad_tool_calls(tools: list[dict[str, Any]]) -> list[str]:
    """Calls of every tool with each parameter set to wrongly typed or absurd values."""
    calls = []
    for tool in tools:
        fn = tool.get("function", {})
        params = list(fn.get("parameters", {}).get("properties", {}))
        for value in _BAD_ARGUMENTS:
            args = {p: value for p in params}
            body = json.dumps({"name": fn.get("name"), "arguments": args})
            calls.append(f"<tool_call>{body}</tool_call>")
    return calls


def check_garbage_actions(ctx: Context) -> str:
    session, cfg = ctx.session, ctx.config
    session.reset(cfg.seed)
    actions = cfg.garbage_actions + bad_tool_calls(ctx.tools)
    for action in actions:
        _obs, reward, terminated, truncated, _ = session.step(action)
        check_reward(reward, cfg.reward_min, cfg.reward_max)
        if terminated or truncated:
            session.reset(cfg.seed)
    return f"survived {len(actions)} malformed actions"


def check_determinism(ctx: Context) -> str:
    assert ctx.replay is not None
    fresh = ctx.new_session()
    fresh.reset(ctx.config.seed)
    if fresh.solution() != ctx.solution:
        raise _fail(
            FailureKind.NONDETERMINISTIC,
            "solution() differs between two sessions with the same seed",
        )
    again = ctx.play(fresh, scripted(ctx.solution))
    if again.transcript() != ctx.replay.transcript():
        turn = next(
            (
                i
                for i, (a, b) in enumerate(zip(again.steps, ctx.replay.steps, strict=False))
                if a != b
            ),
            min(len(again.steps), len(ctx.replay.steps)),
        )
        where = (
            "first observation"
            if again.first_observation != ctx.replay.first_observation
            else f"step {turn + 1}"
        )
        raise _fail(
            FailureKind.NONDETERMINISTIC,
            f"two fresh sessions, same seed and actions, differ at {where}",
        )
    return f"two fresh sessions replay identically ({len(again.steps)} steps)"


def check_termination(ctx: Context) -> str:
    cfg = ctx.config
    for label, action in (("empty", ""), ("repeated invalid", "\\boxed{?}")):
        episode = ctx.play(ctx.session, scripted([], filler=action))
        if not episode.ended:
            raise _fail(
                FailureKind.NO_TERMINATION, f"{label} actions: no end after {cfg.max_turns} turns"
            )
        ctx.empty_play = ctx.empty_play or episode
    return f"episodes end within {cfg.max_turns} turns"


def check_feasibility(ctx: Context) -> str:
    replay, threshold = ctx.replay, ctx.config.success_threshold
    assert replay is not None
    if not replay.terminated:
        raise _fail(
            FailureKind.INFEASIBLE,
            f"solution's {len(ctx.solution)} actions end after {len(replay.steps)} steps "
            "without terminating",
        )
    if not replay.succeeded(threshold):
        raise _fail(
            FailureKind.INFEASIBLE,
            f"solution ends with reward {replay.final_reward:g}, below the goal {threshold:g}",
        )
    return (
        f"solution reaches the goal in {len(replay.steps)} turns (reward {replay.final_reward:g})"
    )


def check_non_triviality(ctx: Context) -> str:
    cfg = ctx.config
    assert ctx.empty_play is not None
    if ctx.empty_play.succeeded(cfg.success_threshold):
        raise _fail(
            FailureKind.TRIVIAL,
            f"empty actions reach the goal in {len(ctx.empty_play.steps)} turns",
        )
    wins = 0
    for i in range(cfg.random_episodes):
        rng = random.Random(cfg.seed * 1000 + i)
        episode = ctx.play(ctx.session, random_policy(rng, ctx.tool_names))
        if not episode.ended:
            raise _fail(
                FailureKind.NO_TERMINATION,
                f"random episode {i}: no end after {cfg.max_turns} turns",
            )
        wins += episode.succeeded(cfg.success_threshold)
    rate = wins / cfg.random_episodes if cfg.random_episodes else 0.0
    if rate > cfg.max_random_win_rate:
        raise _fail(
            FailureKind.TRIVIAL,
            f"random actions reach the goal in {wins}/{cfg.random_episodes} episodes",
        )
    return f"empty play fails; random play wins {wins}/{cfg.random_episodes}"


def check_novelty(ctx: Context) -> str:
    """Not a near-verbatim copy of a reference (source similarity), and not playing exactly
    like the references most similar by source (side-by-side play: every step answered alike,
    whatever the first observation says)."""
    cfg = ctx.config
    if not ctx.references:
        return "no references to compare with"
    ranking = rank_references(
        ctx.code,
        ctx.references,
        keep=max(1, cfg.behaviour_references),
        max_tokens=cfg.similarity_max_tokens,
    )
    notes = list(ranking.notes)
    if ranking.top:
        ctx.similarity = ranking.top[0].similarity
    for top in ranking.top:
        if top.similarity < cfg.max_similarity:
            break
        if _literal_edits_only(ctx.code, top.reference.code, cfg.similarity_max_tokens):
            raise _fail(
                FailureKind.DUPLICATE,
                f"a near-verbatim copy of {top.reference.name!r}: source similarity "
                f"{top.similarity:.3f} >= {cfg.max_similarity:g}",
            )
    differs = []
    for scored in ranking.top[: cfg.behaviour_references]:
        ref = scored.reference
        session, note = open_reference(ref, ctx.policy, cfg.max_turns)
        if session is None:
            notes.append(note)
            continue
        sizes = reference_sizes(ctx.code, ref.code)
        try:
            outcome = same_game(
                ctx.session,
                session,
                _plans(ctx, ctx.seed_solutions),
                functools.partial(_more_plans, ctx, ctx.session, ctx.seed_solutions),
            )
            resized = _at_sizes(ctx, session, sizes) if not outcome.identical and sizes else None
        finally:
            session.close()
        for result, at in ((outcome, ""), (resized, f" at its own sizes ({sizes_text(sizes)})")):
            if result is not None and result.identical:
                opening = "; only its opening is worded differently" if result.where else ""
                if result.relabelled:
                    opening += "; its feedback is worded differently, one to one (the same clues)"
                raise _fail(
                    FailureKind.DUPLICATE,
                    f"plays exactly like {ref.name!r}{at}: identical transcripts over"
                    f" {result.seeds} seeds x {result.actions} actions (source similarity"
                    f" {scored.similarity:.3f})" + opening,
                )
        differs.append(f"{ref.name!r} ({outcome.where})")
    parts = ["no reference could be compared"]
    if ranking.top:
        top = ranking.top[0]
        # at or over the threshold a design passes only by more than literal edits: say which
        below = top.similarity < cfg.max_similarity
        sign = "<" if below else ">="
        parts = [
            f"closest of {ranking.compared}: {top.reference.name!r}, source similarity "
            f"{top.similarity:.3f} {sign} {cfg.max_similarity:g}"
            + ("" if below else " (more than literal edits)")
        ]
    if differs:
        parts.append("plays differently from " + ", ".join(differs))
    return "; ".join(parts + notes)


def _literal_edits_only(code: str, reference: str, max_tokens: int) -> bool:
    """Whether only literals differ between two sources (both parsed: the ranking did)."""
    return literal_edits_only(source_tokens(code, max_tokens), source_tokens(reference, max_tokens))


def _plans(ctx: Context, solutions: dict[int, list[str]]) -> list[Plan]:
    cfg = ctx.config
    garbage = cfg.garbage_actions + bad_tool_calls(ctx.tools)
    return list(
        plans(
            cfg.probe_seeds,
            solutions,
            garbage,
            ctx.tool_names,
            cfg.behaviour_random_episodes,
            cfg.max_turns,
        )
    )


NEAR_MISSES = 12
"""Near misses per seed (one digit of the solution moved) a suspected copy plays."""


def _more_plans(
    ctx: Context,
    session: JailedSession,
    solutions: dict[int, list[str]],
    reference: JailedSession,
) -> list[Plan]:
    """What confirms a suspected copy (:func:`more_plans`): ``solutions`` (of the probe seeds)
    and, from ``session``, those of ``behaviour_confirm_seeds`` seeds after them; the
    reference's solutions on all of them."""
    cfg = ctx.config
    seeds = [(cfg.probe_seeds[-1] + 1 + i) % 2**32 for i in range(cfg.behaviour_confirm_seeds)]
    everything, theirs = dict(solutions), {}
    for seed in seeds:
        session.reset(seed)
        everything[seed] = session.solution()
    for seed in everything:
        try:
            reference.reset(seed)
            theirs[seed] = reference.solution()
        except EnvFailure:  # a reference that cannot say its solution is compared without it
            continue
    episodes, turns = cfg.behaviour_random_episodes, cfg.max_turns
    return list(more_plans(seeds, everything, theirs, ctx.tool_names, episodes, turns, NEAR_MISSES))


def _at_sizes(
    ctx: Context, reference: JailedSession, sizes: dict[str, object]
) -> Comparison | None:
    """The design played at the reference's constructor sizes against the reference (a retuned
    copy plays exactly like it there); None when the design does not run at those sizes (it
    is then not that game: a crash there is no failure of the design at its own)."""
    try:
        resized = ctx.new_session(**sizes)
        solutions = {}
        for seed in ctx.config.probe_seeds:
            resized.reset(seed)
            solutions[seed] = resized.solution()
        more = functools.partial(_more_plans, ctx, resized, solutions)
        return same_game(resized, reference, _plans(ctx, solutions), more)
    except EnvFailure:  # the design broke at sizes it never promised: not the same game
        return None


CHECKS: list[tuple[str, Callable[[Context], str]]] = [
    ("parse", check_parse),
    ("import_policy", check_import_policy),
    ("class_found", check_class_found),
    ("tool_schemas", check_tool_schemas),
    ("reset_contract", check_reset_contract),
    ("step_contract", check_step_contract),
    ("garbage_actions", check_garbage_actions),
    ("determinism", check_determinism),
    ("termination", check_termination),
    ("feasibility", check_feasibility),
    ("non_triviality", check_non_triviality),
    ("seed_dependence", check_seed_dependence),
    ("informative", check_informative),
    ("winnable", check_winnable),
    ("leaks_answer", check_leaks_answer),
    ("perverse_credit", check_perverse_credit),
    ("novelty", check_novelty),
]
