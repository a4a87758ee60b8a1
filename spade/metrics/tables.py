"""A round's designs and a sample of its rollouts as plain table rows, for the tracker sinks.

Pure functions over the rows the round's stages stored (``verify/attempts.jsonl``,
``score/scored.jsonl``, ``hint/environments.jsonl``, ``evaluate/envs/<id>/trajectories.jsonl``:
:mod:`spade.pipeline.tracker` reads them); no store, wandb or tensorboard here, so what a table
holds is testable on its own. :mod:`spade.metrics.sinks` writes the rows as a W&B table and as
TensorBoard text.

- :func:`design_rows`: one row per design attempt of the round (:data:`DESIGN_COLUMNS`): how it
  was asked for, the verifier's verdict (``accepted`` or the failure kind) and reason, the hint,
  what the agent made of it (unhinted and hinted win rate, regret) and the designer's reward.
- :func:`sample_rollouts` and :func:`rollout_row`: a seeded sample of the round's plays
  (:data:`ROLLOUT_COLUMNS`), spread over the environments played, each play's turns as text
  (:func:`turns_text`: action and observation per turn, cut to :data:`TEXT_LIMITS`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DESIGN_COLUMNS: tuple[str, ...] = (
    "round",
    "env_id",
    "slot",
    "attempt",
    "skill",
    "strategy",
    "parent",
    "directive",
    "verdict",
    "reason",
    "hint",
    "win_rate",
    "hinted_win_rate",
    "regret",
    "designer_reward",
    "code",
)
"""The designs table: ``verdict`` is ``accepted`` or the failure kind (``parse``, ``crash``,
``duplicate``, ..., ``inference`` for a request that failed on our side); ``reason`` the
failure's reason (for an accepted design: the reasons of the checks that judged it as a player
meets it, ``check: reason`` per line); ``designer_reward`` the reward before centring; the win
rates and regret are None for a design that was not played; ``code`` is cut at
``TEXT_LIMITS["code"]`` characters."""

ROLLOUT_COLUMNS: tuple[str, ...] = (
    "round",
    "env_id",
    "source",
    "seed",
    "hinted",
    "status",
    "turns",
    "return",
    "transcript",
)
"""The rollouts table: ``source`` is ``designed`` or ``pool``; ``turns`` the number of turns
played; ``transcript`` the play as text (:func:`turns_text`)."""

TEXT_LIMITS: dict[str, int] = {
    "code": 20_000,  # a design's code (the demo's are 2-6 KB)
    "field": 400,  # one action, one observation, the opening observation
    "transcript": 6_000,  # one play's whole text
    "head_turns": 12,  # turns shown from the start of a long play ...
    "tail_turns": 4,  # ... and from its end, the ones between counted
}
"""Where table text is cut (what is cut says how much it left out)."""


@dataclass
class RoundTables:
    """A round's tables: rows of :data:`DESIGN_COLUMNS` and of :data:`ROLLOUT_COLUMNS`."""

    round: int
    designs: list[dict[str, Any]] = field(default_factory=list)
    rollouts: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.designs or self.rollouts)


def clip(text: str | None, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out."""
    text = text or ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def _one_line(text: str | None, limit: int) -> str:
    return clip(" ".join((text or "").split()), limit)


def _reason(attempt: Mapping[str, Any], scored: Mapping[str, Any]) -> str | None:
    """The failure's reason; for an accepted design, the player checks' reasons (if any)."""
    if not (scored.get("accepted", attempt.get("accepted"))):
        return attempt.get("failure_reason") or scored.get("failure_reason")
    checks = scored.get("checks") or {}
    return "\n".join(f"{name}: {reason}" for name, reason in checks.items()) or None


def design_rows(
    round: int,
    attempts: Sequence[Mapping[str, Any]],
    scored: Sequence[Mapping[str, Any]],
    hints: Mapping[str, str | None],
) -> list[dict[str, Any]]:
    """One row per design attempt (:data:`DESIGN_COLUMNS`).

    ``attempts``: the round's attempts as ``verify/attempts.jsonl`` holds them (code, verdict);
    ``scored``: ``score/scored.jsonl``'s rows (pool rows are skipped: no design); ``hints``:
    env id -> hint (``hint/environments.jsonl``). An attempt and its score row are matched by
    (slot, attempt). The rows follow the score stage's order (every attempt the round scored,
    a replayed design included), else the attempts file's (a round not scored yet).
    """
    by_slot = {(a.get("slot"), a.get("attempt")): a for a in attempts}
    designed = [s for s in scored if s.get("source", "designed") == "designed"]
    pairs: list[tuple[Mapping[str, Any], Mapping[str, Any]]]
    if designed:
        pairs = [(by_slot.get((s.get("slot"), s.get("attempt")), {}), s) for s in designed]
    else:
        pairs = [(a, {}) for a in attempts]
    rows = []
    for attempt, score in pairs:
        env_id = score.get("env_id") or attempt.get("env_id")
        accepted = bool(score.get("accepted", attempt.get("accepted")))
        failure = score.get("failure") or attempt.get("failure_kind")
        reward = score.get("raw_reward", score.get("reward"))
        rows.append(
            {
                "round": round,
                "env_id": env_id,
                "slot": score.get("slot", attempt.get("slot")),
                "attempt": score.get("attempt", attempt.get("attempt")),
                "skill": score.get("skill") or attempt.get("skill"),
                "strategy": score.get("strategy") or attempt.get("strategy"),
                "parent": score.get("parent") or attempt.get("parent_id"),
                "directive": score.get("directive") or attempt.get("directive"),
                "verdict": "accepted" if accepted else (failure or "rejected"),
                "reason": _reason(attempt, score),
                "hint": hints.get(env_id or "") or attempt.get("hint"),
                "win_rate": score.get("win_rate"),
                "hinted_win_rate": score.get("hinted_win_rate"),
                "regret": score.get("regret"),
                "designer_reward": reward,
                "code": clip(attempt.get("code"), TEXT_LIMITS["code"]),
            }
        )
    return rows


def _opening(trajectory: Mapping[str, Any]) -> str | None:
    """What the player saw first: the first user message (the reset observation, with the hint
    when hinted)."""
    for message in trajectory.get("messages") or []:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return None


def turns_text(trajectory: Mapping[str, Any]) -> str:
    """A play as text: the opening observation, then ``> action`` and the observation of each
    turn (each cut to ``TEXT_LIMITS["field"]``; a long play shows its first and last turns and
    counts those between), its end and return; the whole cut to ``TEXT_LIMITS["transcript"]``."""
    limit = TEXT_LIMITS["field"]
    turns = list(trajectory.get("turns") or [])
    lines = []
    if (opening := _opening(trajectory)) is not None:
        lines.append(f"[start] {_one_line(opening, limit)}")
    head, tail = TEXT_LIMITS["head_turns"], TEXT_LIMITS["tail_turns"]
    shown = list(enumerate(turns, 1))
    if len(turns) > head + tail:
        shown = [*shown[:head], (0, {}), *shown[-tail:]]
    for n, turn in shown:
        if n == 0:
            lines.append(f"… {len(turns) - head - tail} turns left out …")
            continue
        lines.append(f"[{n}] > {_one_line(turn.get('action'), limit)}")
        lines.append(f"    {_one_line(turn.get('observation'), limit)}")
    end = f"[end] {trajectory.get('status', '?')}, return {_number(trajectory.get('return'))}"
    if failure := trajectory.get("failure"):
        end += f" ({failure.get('kind')}: {_one_line(failure.get('reason'), limit)})"
    lines.append(end)
    return clip("\n".join(lines), TEXT_LIMITS["transcript"])


def _number(value: Any) -> str:
    return "None" if value is None else f"{float(value):g}"


def rollout_row(round: int, trajectory: Mapping[str, Any], source: str) -> dict[str, Any]:
    """One play as a row of :data:`ROLLOUT_COLUMNS`."""
    return {
        "round": round,
        "env_id": trajectory.get("env_id"),
        "source": source,
        "seed": trajectory.get("seed"),
        "hinted": bool(trajectory.get("hinted")),
        "status": trajectory.get("status"),
        "turns": len(trajectory.get("turns") or []),
        "return": trajectory.get("return"),
        "transcript": turns_text(trajectory),
    }


def _interleaved(plays: list[Mapping[str, Any]], rng: random.Random) -> list[Mapping[str, Any]]:
    """An environment's plays shuffled, unhinted and hinted alternating (unhinted first)."""
    unhinted = [t for t in plays if not t.get("hinted")]
    hinted = [t for t in plays if t.get("hinted")]
    rng.shuffle(unhinted)
    rng.shuffle(hinted)
    out: list[Mapping[str, Any]] = []
    for i in range(max(len(unhinted), len(hinted))):
        out += unhinted[i : i + 1] + hinted[i : i + 1]
    return out


def sample_rollouts(
    env_ids: Sequence[str],
    load: Callable[[str], Sequence[Mapping[str, Any]]],
    samples: int,
    seed: int | str,
) -> list[Mapping[str, Any]]:
    """``samples`` plays drawn with ``seed`` (the same draw each time), spread over
    ``env_ids``: the environments in a seeded order, one play of each in turn, unhinted and
    hinted alternating within an environment. ``load(env_id)`` gives an environment's plays
    (``trajectories.jsonl``'s rows), called only for environments the draw reaches; plays that
    failed on our side (``inference_failed``: they measure nothing) are never drawn."""
    if samples <= 0:
        return []
    rng = random.Random(f"rollouts:{seed}")
    order = sorted(set(env_ids))
    rng.shuffle(order)
    picked: list[Mapping[str, Any]] = []
    queues: list[list[Mapping[str, Any]]] = []
    pending = iter(order)
    while len(picked) < samples:
        # enough environments to draw the rest one play each (their plays permitting)
        while len(queues) < samples - len(picked) and (env_id := next(pending, None)):
            plays = [t for t in load(env_id) if t.get("status") != "inference_failed"]
            if plays:
                queues.append(_interleaved(plays, rng))
        if not queues:
            break
        for queue in queues:
            if len(picked) < samples:
                picked.append(queue.pop(0))
        queues = [q for q in queues if q]
    return picked


__all__ = [
    "DESIGN_COLUMNS",
    "ROLLOUT_COLUMNS",
    "TEXT_LIMITS",
    "RoundTables",
    "clip",
    "design_rows",
    "rollout_row",
    "sample_rollouts",
    "turns_text",
]
