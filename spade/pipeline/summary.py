"""Reading a campaign back: per-round summaries and where its artifacts are (status, UI).

A round's numbers come from its committed files: ``score/scored.jsonl`` (a row per design
attempt, ``source: designed``; ``failed: true`` for one whose request failed on our side,
counted as ``failed_designs`` and left out of every other count and measure; then a row per
pool environment played, ``source: pool``; rows written before pool environments existed have
no ``source`` and are designs), ``evaluate/evaluations.jsonl`` (plays per environment,
``failed_plays``: plays that failed on the inference side, left out of every measure;
``resumed_plays``: plays that went on in a fresh session after theirs expired waiting on the
model; and the paired regret: rows stored before plays were paired have none), the
training stages' ``outcome.json``, ``publish/weights.json`` and ``heldout/summary.json``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from spade.pipeline.campaign import recorded_target
from spade.pipeline.record import read_jsonl
from spade.pipeline.replay import PLAN_FILE
from spade.stats import mean
from spade.storage import CampaignStore

SUMMARY_COLUMNS: tuple[str, ...] = (
    "round",
    "replay_of",
    "attempts",
    "accepted",
    "novel",
    "duplicates",
    "repaired",
    "pool_envs",
    "win_rate",
    "mean_return",
    "hinted_win_rate",
    "regret",
    "designer_reward",
    "designer_spread",
    "train_loss",
    "designer_loss",
    "heldout_win_rate",
    "weights",
)
"""The per-round numbers tables show (``spade status``, the Prefect artifact, the live view):

- ``attempts``, ``accepted``: design attempts of the round and how many the verifier accepted
  (a replay round designs nothing: ``accepted`` counts the designs it replays);
- ``novel``: accepted designs whose verdict passed the verifier's novelty check (None when no
  such check ran), ``duplicates``: attempts rejected as copies, ``repaired``: accepted after a
  repair turn;
- ``pool_envs``: pool environments played (``run.env_source: pool``, ``run.min_envs``);
- ``win_rate``, ``hinted_win_rate``, ``regret``: means over every environment played (and in
  ``--json`` ``paired_regret``: the mean paired regret, taken per instance, of the environments
  that have one: :mod:`spade.agent.evaluate`);
  ``mean_return`` (and ``hinted_mean_return`` in ``--json``): the mean episode return, partial
  credit included, where a win rate counts full wins only;
- ``designer_reward``: mean reward of the attempts before centring; ``designer_spread``: max -
  min of the rewards the designer trains on (centred per skill: 0 means no signal);
- ``train_loss``, ``designer_loss``: the agent's and the designer's GRPO loss (None: skipped,
  see ``agent_skipped`` / ``designer_skipped``);
- ``weights``: the version the round published (what the next round serves).

``summarize_round`` also gives each role's budget, ``agent_updates`` / ``designer_updates``
(optimizer steps) and ``agent_tokens`` / ``designer_tokens`` (sampled tokens trained on), and
``training_health`` (role -> :data:`HEALTH_METRICS`), printed
under ``spade status``'s table.
"""


def _rows(cs: CampaignStore, round: int, stage: str, name: str) -> list[dict[str, Any]]:
    key = cs.layout.stage_key(round, stage, name)
    return read_jsonl(cs, key) if cs.store.exists(key) else []


def _json(cs: CampaignStore, round: int, stage: str, name: str) -> Any:
    key = cs.layout.stage_key(round, stage, name)
    return cs.store.read_json(key) if cs.store.exists(key) else None


def _mean(values: list[float | None]) -> float | None:
    """Mean of the values present (an environment without hinted plays has no hinted rate),
    rounded for the summary."""
    value = mean(values)
    return None if value is None else round(value, 4)


def _spread(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(max(present) - min(present), 4) if present else None


def _count(rows: list[dict[str, Any]], flag: str) -> int | None:
    """Rows whose ``flag`` is true; None when no row knows (older rows, or no check ran)."""
    known = [r[flag] for r in rows if r.get(flag) is not None]
    return sum(bool(v) for v in known) if known else None


def _novel(designed: list[dict[str, Any]]) -> int | None:
    """Accepted designs that passed the novelty check: 0 when none was accepted (a rejected
    design is not a novel one, whether or not it got as far as the check)."""
    if not designed:
        return None
    accepted = [r for r in designed if r["accepted"]]
    return _count(accepted, "novel") if accepted else 0


def _failed(row: dict[str, Any]) -> bool:
    """A design attempt whose request failed on our side (older rows: failure ``inference``)."""
    return bool(row.get("failed")) or row.get("failure") == "inference"


HEALTH_METRICS = (
    "mismatch_kl",
    "mismatch_outside",
    "zero_variance_groups",
    "is_weight_mean",
    "dropped_samples",
    "shift_kl",
    "shift_up",
    "shift_down",
)
"""An update's health (``training_health``): the sampler/trainer mismatch (k3 KL and share of
ratios outside [0.5, 2], :func:`spade.training.loss.mismatch_metrics`), the share of groups
with no gradient, the mean truncated importance weight, the replies dropped for want of
token ids and, with ``training.measure_shift``, how far the update moved the policy
(:mod:`spade.training.shift`)."""


def _training(outcome: dict[str, Any]) -> tuple[float | None, str | None]:
    return (outcome.get("metrics") or {}).get("loss"), outcome.get("skipped")


def _budget(outcomes: dict[str, dict[str, Any]]) -> dict[str, int | None]:
    """Per role, the optimizer steps its update took and the sampled tokens it trained on (0
    for a skipped update; None for a role whose training stage has not committed): what a
    comparison of campaigns matches."""
    out: dict[str, int | None] = {}
    for role, outcome in outcomes.items():
        if not outcome:  # the stage has not committed
            out[f"{role}_updates"] = out[f"{role}_tokens"] = None
            continue
        metrics = outcome.get("metrics") or {}  # none: the update was skipped
        # an update without a gradient takes no optimizer step (older records: every update did)
        steps = metrics.get("optimizer_steps", metrics.get("updates", 1))
        out[f"{role}_updates"] = int(steps) if metrics else 0
        out[f"{role}_tokens"] = int(metrics.get("trained_tokens", 0))
    return out


def _health(outcome: dict[str, Any]) -> dict[str, float] | None:
    """The :data:`HEALTH_METRICS` an update recorded (None: no update, or none recorded)."""
    metrics = outcome.get("metrics") or {}
    found = {k: round(float(metrics[k]), 6) for k in HEALTH_METRICS if k in metrics}
    return found or None


def summarize_round(cs: CampaignStore, round: int) -> dict[str, Any]:
    """Counts and means of one round from its committed artifacts (missing parts: None)."""
    done = cs.completed_stages(round)
    scored = _rows(cs, round, "score", "scored.jsonl")
    every_design = [s for s in scored if s.get("source", "designed") == "designed"]
    designs = [s for s in every_design if not _failed(s)]  # an outage is no attempt
    pool = [s for s in scored if s.get("source") == "pool"]
    accepted = [s for s in designs if s["accepted"]]
    played = accepted + pool
    plan = _json(cs, round, "sample_documents", PLAN_FILE) or {}
    designed = designs if plan.get("replay_of") is None else []  # a replay round designed none
    outcomes = {
        role: _json(cs, round, f"train_{role}", "outcome.json") or {}
        for role in ("agent", "designer")
    }
    agent_loss, agent_skipped = _training(outcomes["agent"])
    designer_loss, designer_skipped = _training(outcomes["designer"])
    episodes = Counter[str]()
    failed_plays = resumed_plays = 0
    evaluations = _rows(cs, round, "evaluate", "evaluations.jsonl")
    for e in evaluations:
        episodes[e.get("source", "designed")] += len(e.get("unhinted_returns") or [])
        failed_plays += int(e.get("failed_plays") or 0)
        resumed_plays += int(e.get("resumed_plays") or 0)  # 0 in rows stored before
    weights = _json(cs, round, "publish", "weights.json") or {}
    heldout = _json(cs, round, "heldout", "summary.json") or {}
    seconds = {}
    for stage in cs.layout.stages:
        if (m := cs.read_stage_manifest(round, stage)) is not None:
            seconds[stage] = m.seconds
    return {
        "round": round,
        "stages_done": len(done),
        "stages_total": len(cs.layout.stages),
        "complete": len(done) == len(cs.layout.stages),
        "replay_of": plan.get("replay_of"),  # a replay round: "accepted" = the replayed envs
        "attempts": len(designed),
        "accepted": len(accepted),
        "novel": _novel(designed),
        "duplicates": sum(s["failure"] == "duplicate" for s in designed),
        "repaired": _count(designed, "repaired") if designed else None,
        "pool_envs": len(pool),
        "rejections": dict(
            Counter(s["failure"] or "rejected" for s in designs if not s["accepted"])
        ),
        "win_rate": _mean([s["win_rate"] for s in played]),
        "hinted_win_rate": _mean([s["hinted_win_rate"] for s in played]),
        "regret": _mean([s["regret"] for s in played]),
        "paired_regret": _mean([e.get("paired_regret") for e in evaluations]),
        "mean_return": _mean([s.get("mean_return") for s in played]),
        "hinted_mean_return": _mean([s.get("hinted_mean_return") for s in played]),
        "designed_win_rate": _mean([s["win_rate"] for s in accepted]),
        "designed_regret": _mean([s["regret"] for s in accepted]),
        "designer_reward": _mean([s.get("raw_reward", s["reward"]) for s in designed]),
        "designer_spread": _spread([s["reward"] for s in designed]),
        "designed_episodes": episodes["designed"],
        "pool_episodes": episodes["pool"],
        "failed_plays": failed_plays,  # inference failures: counted, left out of every measure
        "resumed_plays": resumed_plays,  # went on in a fresh session (measured as any other)
        "failed_designs": len(every_design) - len(designs),  # likewise, of design requests
        "train_loss": agent_loss,
        "agent_skipped": agent_skipped,
        "designer_loss": designer_loss,
        "designer_skipped": designer_skipped,
        **_budget(outcomes),
        "training_health": {
            role: health for role, o in outcomes.items() if (health := _health(o)) is not None
        },
        "heldout_win_rate": heldout.get("win_rate"),
        "heldout_mean_return": heldout.get("mean_return"),
        "heldout_plays": heldout.get("plays"),
        "heldout_win_rate_interval": heldout.get("win_rate_interval"),
        "heldout_mean_return_interval": heldout.get("mean_return_interval"),
        "heldout_suites": heldout.get("suites") or {},
        "heldout_base": heldout.get("base"),  # round 0: the base weights' held-out numbers
        "weights": weights.get("version"),
        "stage_seconds": seconds,
        "designs_played": _designs_played(cs, round, accepted if designed else [], evaluations),
    }


PAIRED = ("paired_regret", "paired_regret_interval")
"""An environment's paired regret and its interval, as its evaluation row holds them."""


def _designs_played(
    cs: CampaignStore,
    round: int,
    accepted: list[dict[str, Any]],
    evaluations: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """What the round's accepted designs became: how each was asked for, its unhinted and
    hinted win rates, regret and paired regret (with its interval: None where its evaluation
    has none), designer reward (before centring), hint, and the reasons of the checks that
    judged it as a player meets it (:data:`spade.scoring.outcomes.PLAYER_CHECKS`)."""
    hints = {h["env_id"]: h.get("hint") for h in _rows(cs, round, "hint", "environments.jsonl")}
    paired = {e.get("env_id"): e for e in evaluations}
    keys = (
        "env_id",
        "strategy",
        "parent",
        "directive",
        "win_rate",
        "hinted_win_rate",
        "regret",
        "checks",
    )
    return [
        {k: s.get(k) for k in keys}
        | {k: paired.get(s.get("env_id"), {}).get(k) for k in PAIRED}
        | {"reward": s.get("raw_reward", s.get("reward")), "hint": hints.get(s.get("env_id"))}
        for s in accepted
    ]


def campaign_status(cs: CampaignStore) -> dict[str, Any]:
    """Every round's summary and the last committed stage."""
    last = cs.last_completed()
    return {
        "campaign": cs.layout.campaign_id,
        "store": cs.store.url(cs.layout.campaign_prefix),
        "target_rounds": recorded_target(cs),  # what the last run was asked for (0: no end)
        "rounds": [summarize_round(cs, r) for r in cs.rounds()],
        "last_completed": {"round": last[0], "stage": last[1]} if last else None,
    }
