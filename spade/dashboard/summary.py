"""Per-round summaries of a campaign, from the few small files each round commits.

Pure functions over bytes already read (no store access here): :func:`summarize` turns a round's
stage manifests and its :data:`ROUND_FILES` into a :class:`RoundSummary`; an :class:`Overview`
holds every round's. :mod:`spade.dashboard.data` does the reading and the caching.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spade.stats import mean
from spade.storage import STAGES, StageManifest

TRAIN_METRICS = (
    "loss",
    "kl",
    "clip_fraction",
    "grad_norm",
    "entropy",
    "mismatch_kl",
    "mismatch_outside",
    "zero_variance_groups",
    "dropped_samples",
)
ROUND_FILES = {
    "scored": ("score", "scored.jsonl"),
    "evaluations": ("evaluate", "evaluations.jsonl"),  # the paired regret (not in scored)
    "agent": ("train_agent", "outcome.json"),
    "designer": ("train_designer", "outcome.json"),
    "heldout": ("heldout", "summary.json"),
    "weights": ("publish", "weights.json"),
}
"""The small per-round files the overview reads: name -> (stage, output)."""
ROW_FIELDS = (
    "round",
    "replay_of",
    "attempts",
    "accepted",
    "pool_envs",
    "acceptance_rate",
    "win_rate",
    "hinted_win_rate",
    "mean_return",
    "hinted_mean_return",
    "regret",
    "paired_regret",
    "designer_reward",
    "heldout_win_rate",
    "heldout_mean_return",
    "memory_size",
    "weights",
)


def parse_jsonl(data: bytes) -> list[Any]:
    """The rows of a JSON-lines object."""
    return [json.loads(line) for line in data.splitlines() if line.strip()]


@dataclass(frozen=True)
class RoundSummary:
    """One round as the charts show it; ``None`` where the stage has not committed."""

    round: int
    stages_done: list[str]
    stage_seconds: dict[str, float]
    replay_of: int | None = None  # a replay round: the regeneration round it plays again
    attempts: int = 0
    accepted: int = 0
    pool_envs: int = 0  # pool environments played (run.env_source pool, run.min_envs)
    acceptance_rate: float | None = None
    win_rate: float | None = None
    hinted_win_rate: float | None = None
    mean_return: float | None = None  # partial credit counted (a win rate counts full wins)
    hinted_mean_return: float | None = None
    regret: float | None = None
    paired_regret: float | None = None  # per instance; environments with one (older: none)
    designer_reward: float | None = None
    rejections: dict[str, int] = field(default_factory=dict)  # failure kind -> count
    skills: dict[str, int] = field(default_factory=dict)  # accepted designs per skill
    train: dict[str, dict[str, float]] = field(default_factory=dict)  # role -> metrics
    heldout_win_rate: float | None = None
    heldout_mean_return: float | None = None
    heldout_suites: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> summary
    heldout: dict[str, Any] = field(default_factory=dict, repr=False)  # heldout/summary.json
    weights: str | None = None
    memory_size: int | None = None
    envs: list[dict[str, Any]] = field(default_factory=list, repr=False)  # scored.jsonl rows

    @property
    def complete(self) -> bool:
        """Every stage of the pipeline committed (completed or skipped)."""
        return all(stage in self.stages_done for stage in STAGES)

    def row(self) -> dict[str, Any]:
        """The flat numbers of the round (one table row)."""
        out: dict[str, Any] = {k: getattr(self, k) for k in ROW_FIELDS}
        for role in ("agent", "designer"):
            for name in TRAIN_METRICS:
                out[f"{role}_{name}"] = self.train.get(role, {}).get(name)
        for name, suite in self.heldout_suites.items():
            out[f"heldout_{name}"] = suite.get("score")
        out["seconds"] = round(sum(self.stage_seconds.values()), 3)
        return out


def summarize(
    rnd: int, manifests: Mapping[str, StageManifest], files: Mapping[str, bytes]
) -> RoundSummary:
    """A :class:`RoundSummary` from a round's manifests and its :data:`ROUND_FILES` bytes.

    A replay round (``spade.pipeline.replay``; its ``sample_documents`` manifest names the
    round it replays) designed nothing: no attempts and no designer reward; its "accepted"
    environments are the replayed ones. Pool environments (``source: pool`` in
    ``scored.jsonl``) count in the win rates and regret, not as designs."""
    scored = parse_jsonl(files["scored"]) if "scored" in files else []
    evaluations = parse_jsonl(files["evaluations"]) if "evaluations" in files else []
    designs = [  # an attempt whose request failed on our side is no design: not counted here
        s
        for s in scored
        if s.get("source", "designed") == "designed"
        and not (s.get("failed") or s.get("failure") == "inference")
    ]
    pool = [s for s in scored if s.get("source") == "pool"]  # played, never the designer's
    accepted = [s for s in designs if s.get("accepted")]
    sampled = manifests.get("sample_documents")
    replay_of = (
        int(sampled.inputs["replay_of"]) if sampled and "replay_of" in sampled.inputs else None
    )
    designed = designs if replay_of is None else []
    objs = {
        k: json.loads(files[k]) for k in ("agent", "designer", "heldout", "weights") if k in files
    }
    train: dict[str, dict[str, float]] = {
        role: {
            k: float(v) for k, v in (objs[role].get("metrics") or {}).items() if k in TRAIN_METRICS
        }
        for role in ("agent", "designer")
        if role in objs and objs[role].get("metrics")
    }
    return RoundSummary(
        round=rnd,
        stages_done=[s for s, m in manifests.items() if m.done],
        stage_seconds={s: float(m.seconds) for s, m in manifests.items()},
        replay_of=replay_of,
        attempts=len(designed),
        accepted=len(accepted),
        pool_envs=len(pool),
        acceptance_rate=len(accepted) / len(designed) if designed else None,
        win_rate=mean(s.get("win_rate") for s in accepted + pool),
        hinted_win_rate=mean(s.get("hinted_win_rate") for s in accepted + pool),
        mean_return=mean(s.get("mean_return") for s in accepted + pool),
        hinted_mean_return=mean(s.get("hinted_mean_return") for s in accepted + pool),
        regret=mean(s.get("regret") for s in accepted + pool),
        paired_regret=mean(e.get("paired_regret") for e in evaluations),
        designer_reward=mean(s.get("raw_reward", s.get("reward")) for s in designed),
        rejections=dict(
            Counter(s.get("failure") or "rejected" for s in designs if not s.get("accepted"))
        ),
        skills=dict(Counter(s.get("skill") or "unknown" for s in accepted)),
        train=train,
        heldout_win_rate=objs.get("heldout", {}).get("win_rate"),
        heldout_mean_return=objs.get("heldout", {}).get("mean_return"),
        heldout_suites=dict(objs.get("heldout", {}).get("suites") or {}),
        heldout=objs.get("heldout", {}),
        weights=objs.get("weights", {}).get("version"),
        envs=scored,
    )


@dataclass(frozen=True)
class Overview:
    """Every round's summary, oldest first, and where the campaign lives."""

    campaign_id: str
    store_url: str
    rounds: list[RoundSummary]
    memory_capacity: int | None = None

    def rows(self) -> list[dict[str, Any]]:
        return [r.row() for r in self.rounds]

    def suites(self) -> list[str]:
        """The held-out suites any round played, in the order they first appear."""
        return list(dict.fromkeys(name for r in self.rounds for name in r.heldout_suites))

    def heldout_table(self) -> list[dict[str, Any]]:
        """The held-out numbers with their 95% intervals: a row for the base weights (played
        in round 0, ``run.heldout_base``) and one per round that played the held-out files."""
        rows = []
        base = next((r.heldout["base"] for r in self.rounds if r.heldout.get("base")), None)
        if base is not None:
            rows.append(heldout_row("base", None, base))
        for r in self.rounds:
            if r.heldout.get("mean_return") is not None:
                rows.append(heldout_row(r.heldout.get("weights") or r.weights, r.round, r.heldout))
        return rows

    def round(self, rnd: int) -> RoundSummary | None:
        return next((r for r in self.rounds if r.round == rnd), None)

    def env_history(self, env_id: str) -> list[dict[str, Any]]:
        """The environment's numbers in every round that evaluated it (same code, same id)."""
        keys = ("win_rate", "hinted_win_rate", "regret", "reward")
        return [
            {"round": r.round} | {k: e.get(k) for k in keys}
            for r in self.rounds
            for e in r.envs
            if e.get("env_id") == env_id and e.get("accepted")
        ]


def heldout_row(weights: str | None, rnd: int | None, summary: dict[str, Any]) -> dict[str, Any]:
    """One row of :meth:`Overview.heldout_table`: the weights played (round None: the base
    weights, before any training), mean return and win rate, each with its interval."""

    def bounds(key: str) -> tuple[float | None, float | None]:
        interval = summary.get(f"{key}_interval") or (None, None)
        return interval[0], interval[1]

    ret_lo, ret_hi = bounds("mean_return")
    win_lo, win_hi = bounds("win_rate")
    return {
        "round": rnd,
        "weights": weights,
        "plays": summary.get("plays"),
        "mean_return": summary.get("mean_return"),
        "mean_return_low": ret_lo,
        "mean_return_high": ret_hi,
        "win_rate": summary.get("win_rate"),
        "win_rate_low": win_lo,
        "win_rate_high": win_hi,
    }


def memory_sizes(summaries: list[RoundSummary], first: int, capacity: int) -> list[int | None]:
    """The memory's size after each round, from its size after the first round that has a
    memory stage: each later one adds its accepted designs, up to ``capacity`` (FIFO); a replay
    round re-measures environments the memory already holds (one record each: no growth)."""
    sizes: list[int | None] = []
    size: int | None = None
    for s in summaries:
        if "memory" in s.stages_done:
            grown = 0 if s.replay_of is not None else s.accepted
            size = first if size is None else min(capacity, size + grown)
        sizes.append(size if "memory" in s.stages_done else None)
    return sizes
