"""A synthetic campaign in an object store, in the shapes the pipeline's stages write.

Every stage of every round is written through :class:`spade.pipeline.record.StageRecord` (and
plain :class:`spade.storage.ObjectStore` writes where the pipeline writes outside a record:
verdicts, per-environment evaluations) and committed with a known duration. The numbers are
seeded, and :class:`SyntheticCampaign` returns what each round should summarise to, computed
here from the rows as written, so tests (and ``bench/dashboard.py``) can check the dashboard.
The held-out stage writes environment-file results and, by default, the three benchmark
suites of :data:`SUITES` (items, transcripts, scores in ``summary.json``) as
``spade.pipeline.heldout`` does.

    camp = build_campaign(tmp_path / "runs", rounds=5, environments=20)
    camp.expected[2]["win_rate"], camp.recurring_env, camp.envs["env-..."]["hint"]
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from spade.config import CampaignConfig
from spade.pipeline.context import RoundContext
from spade.pipeline.record import StageRecord
from spade.records import env_id_for
from spade.stats import bootstrap_interval, interval_json, mean, wilson_interval

SKILLS = ("planning", "arithmetic", "spatial", "deduction")
REJECTIONS = (  # failure kind, failed check (None: never reached the verifier), reason
    ("crash", "reset_contract", "reset() raised KeyError: 'board'"),
    ("trivial", "non_triviality", "random play wins 9 of 10 episodes"),
    ("parse", None, "no ```python block in the completion"),
    ("timeout", "termination", "step() ran past its 5 s limit"),
    ("infeasible", "feasibility", "solution() replayed does not reach the goal"),
)
SUITES = {  # held-out suite -> tasks played per round (spade/benchmarks: reasoning-gym, HumanEval, BFCL)
    "reasoning_gym": ["basic_arithmetic/0", "chain_sum/1", "leg_counting/2", "basic_arithmetic/3"],
    "humaneval": ["HumanEval/0", "HumanEval/12", "HumanEval/53"],
    "bfcl_multi_turn": ["multi_turn_base_0", "multi_turn_base_7"],
}
CHECK_NAMES = ("parse", "import_policy", "class_found", "reset_contract", "step_contract")
STAGE_SECONDS = {
    "sample_documents": 0.25, "design": 41.5, "verify": 12.0, "hint": 6.5, "pool": 0.0,
    "evaluate": 95.0,
    "score": 0.125, "memory": 0.125, "train_agent": 30.0, "train_designer": 18.0,
    "publish": 1.5, "heldout": 22.0,
}  # fmt: skip


def env_code(rnd: int, slot: int, attempt: int, skill: str) -> str:
    return f'''"""Lantern Maze r{rnd}s{slot}a{attempt}: carry the lantern to the exit ({skill})."""
from spade.envs import TextEnv

skill = "{skill}"


class LanternMaze{rnd}x{slot}x{attempt}(TextEnv):
    def reset(self, seed=None, options=None):
        self.pos, self.goal = 0, {3 + slot % 4}
        return f"You stand at 0; the exit is at {{self.goal}}.", {{}}

    def step(self, action):
        self.pos += 1 if action.strip() == "forward" else -1
        done = self.pos == self.goal
        return f"You are at {{self.pos}}.", float(done), done, self.pos < -2, {{}}

    def solution(self):
        return ["forward"] * self.goal
'''


def transcript(env_id: str, seed: int, hint: str | None, won: bool) -> dict[str, Any]:
    """One play in :meth:`spade.records.Trajectory.to_dict`'s shape."""
    last = "You reach the exit. You win!" if won else "The lantern goes out. You lose."
    messages = [
        {"role": "system", "content": "You play a text game. Answer with one action."},
        {"role": "user", "content": f"You stand at 0; the exit is at 3. (seed {seed})"},
        {"role": "assistant", "content": "forward"},
        {"role": "user", "content": last},
    ]
    turn = {
        "prompt_token_ids": [1, 2, 3], "completion_token_ids": [4, 5], "logprobs": [-0.1, -0.2],
        "text": "forward", "action": "forward", "observation": last, "reward": float(won),
        "terminated": True, "truncated": False, "finish_reason": "stop",
        "generate_s": 0.05, "step_s": 0.01,
    }  # fmt: skip
    return {
        "env_id": env_id, "seed": seed, "hinted": hint is not None, "hint": hint,
        "messages": messages, "turns": [turn], "tools": None, "status": "terminated",
        "model": "synthetic", "failure": None, "reset_s": 0.01, "wall_s": 0.2,
        "return": float(won),
    }  # fmt: skip


@dataclass
class SyntheticCampaign:
    """Where the campaign is and what the dashboard should find in it."""

    root: str
    campaign_id: str
    expected: dict[int, dict[str, Any]] = field(default_factory=dict)  # round -> numbers
    envs: dict[str, dict[str, Any]] = field(default_factory=dict)  # last round's env facts
    recurring_env: str | None = None  # an environment designed again in every round
    capacity: int = 0


def build_campaign(
    root: str | Path,
    campaign_id: str = "synthetic",
    rounds: int = 5,
    environments: int = 20,
    *,
    seed: int = 0,
    plays: int = 4,
    capacity: int = 12,
    seed_memory: int = 3,
    detail_rounds: int | None = None,
    in_progress: bool = False,
    storage_options: dict[str, Any] | None = None,
    suites: bool = True,
    accept: bool = True,
) -> SyntheticCampaign:
    """Write ``rounds`` complete rounds accepting ``environments`` designs in all (spread
    evenly), plus one round with only its design half committed when ``in_progress``.

    Per-environment files (code blobs, verdicts, transcripts) are written for the last
    ``detail_rounds`` rounds only (None: all), so big benchmark campaigns stay quick to make.
    ``suites``: the held-out stage also plays :data:`SUITES` (items, transcripts, scores).
    ``accept=False``: every attempt is rejected (a small model's usual round), two per slot.
    """
    storage = {"root": str(root), "storage_options": storage_options or {}}
    cfg = CampaignConfig.model_validate({"storage": storage, "memory": {"capacity": capacity}})
    camp = SyntheticCampaign(str(root), campaign_id, capacity=capacity)
    rng = random.Random(seed)
    seed_record = {"skill": "unknown", "code_head": "class Seed: ...", "win_rate": 0.5,
                   "regret": 0.25, "round": -1, "hint": None, "accepted": True}  # fmt: skip
    memory = [{"env_id": f"seed-{i}"} | seed_record for i in range(seed_memory)]
    first_code: dict[str, str] = {}
    for rnd in range(rounds + int(in_progress)):
        n_env = environments // rounds + int(rnd < environments % rounds)
        detail = detail_rounds is None or rnd >= rounds - detail_rounds
        attempts = _design_half(cfg, campaign_id, rnd, n_env, detail, first_code, accept)
        if rnd == rounds:  # the in-progress round: designed, verified and hinted; no more
            break
        accepted = [a for a in attempts if a["accepted"]]
        # no pool environment played
        pool = StageRecord(RoundContext.open(cfg, campaign_id, rnd), "pool")
        pool.commit("skipped", "run.min_envs is 0", seconds=STAGE_SECONDS["pool"])
        evals = _evaluate(cfg, campaign_id, rnd, accepted, plays, rng, detail)
        scored = _score(cfg, campaign_id, rnd, attempts, evals)
        memory = memory + [_memory_record(a, evals[a["env_id"]], rnd) for a in accepted]
        memory = memory[-capacity:]
        state = {"version": 1, "capacity": capacity, "records": memory}
        _commit(cfg, campaign_id, rnd, "memory", {"memory.json": state})
        metrics = {role: _metrics(rnd, role, rng) for role in ("agent", "designer")}
        for role, m in metrics.items():
            version = f"r{rnd:04d}-{role}"
            outcome = {"metrics": m, "samples": 8 * n_env, "version": version,
                       "checkpoint": f"{root}/ckpt/{version}", "kind": "lora"}  # fmt: skip
            _commit(cfg, campaign_id, rnd, f"train_{role}", {"outcome.json": outcome})
        weights = {"version": f"r{rnd:04d}-designer", "checkpoint": None, "kind": "lora"}
        _commit(cfg, campaign_id, rnd, "publish", {"weights.json": weights})
        summary, items = _heldout(cfg, campaign_id, rnd, rng, suites)
        camp.expected[rnd] = _expected(attempts, scored, len(memory), metrics, summary, weights)
        camp.expected[rnd]["heldout_items"] = items
        if rnd == rounds - 1:
            camp.envs = {a["env_id"]: a | {"evaluation": evals.get(a["env_id"])} for a in attempts if a["env_id"]}  # fmt: skip
    camp.recurring_env = env_id_for(first_code["code"]) if first_code and rounds > 1 else None
    return camp


def _expected(attempts, scored, memory_size, metrics, heldout, weights) -> dict[str, Any]:
    """What the dashboard should show for the round, from the rows as written."""
    ok = [s for s in scored if s["accepted"]]
    failed = [a for a in attempts if not a["accepted"]]
    return {
        "attempts": len(scored),
        "accepted": len(ok),
        "acceptance_rate": len(ok) / len(scored) if scored else None,
        "win_rate": mean(s["win_rate"] for s in ok),
        "hinted_win_rate": mean(s["hinted_win_rate"] for s in ok),
        "regret": mean(s["regret"] for s in ok),
        "mean_return": mean(s["mean_return"] for s in ok),
        "hinted_mean_return": mean(s["hinted_mean_return"] for s in ok),
        "designer_reward": mean(s["reward"] for s in scored),
        "rejections": dict(Counter(s["failure"] for s in scored if not s["accepted"])),
        "rejected_checks": dict(
            Counter((a["verdict"] or {}).get("failed_check") or a["failure_kind"] for a in failed)
        ),
        "skills": dict(Counter(s["skill"] for s in ok)),
        "memory_size": memory_size,
        "heldout_win_rate": heldout["win_rate"],
        "heldout_mean_return": heldout.get("mean_return"),
        "heldout_suites": heldout.get("suites", {}),
        "weights": weights["version"],
        "train": metrics,
        "stage_seconds": dict(STAGE_SECONDS),
    }


def _commit(cfg: CampaignConfig, cid: str, rnd: int, stage: str, outputs: dict[str, Any]) -> None:
    rec = StageRecord(RoundContext.open(cfg, cid, rnd), stage)
    for name, value in outputs.items():
        if name.endswith(".jsonl"):
            rec.write_jsonl(name, value)
        else:
            rec.write_json(name, value)
    rec.commit(seconds=STAGE_SECONDS[stage])


def _design_half(cfg, cid, rnd, n_env, detail, first_code, accept=True) -> list[dict[str, Any]]:
    """sample_documents, design, verify and hint: slots whose first attempt is rejected get a
    second, accepted one; slot 0 of every round after the first re-designs round 0's slot 0.
    ``accept=False``: both attempts of every slot are rejected."""
    n_rej = (max(1, n_env // 3) if n_env else 0) if accept else n_env
    plan = [(slot, 0, slot >= n_rej) for slot in range(n_env)] + [
        (slot, 1, accept) for slot in range(n_rej)
    ]
    docs = [{"doc_id": f"wiki-{rnd:04d}-{i}", "text": f"Lanterns (article {rnd}.{i}): a lantern is a portable light source."} for i in range(len(plan))]  # fmt: skip
    _commit(cfg, cid, rnd, "sample_documents", {"documents.jsonl": docs})
    attempts = []
    for i, (slot, attempt, ok) in enumerate(plan):
        skill = SKILLS[(rnd + slot) % len(SKILLS)]
        code: str | None = env_code(rnd, slot, attempt, skill)
        if ok and slot == 0 and first_code:
            code = first_code["code"]
        elif ok and slot == 0:
            first_code["code"] = code
        kind, check, reason = (
            (None, None, None) if ok else REJECTIONS[(rnd + slot) % len(REJECTIONS)]
        )
        if kind == "parse":
            code = None
        checks = [{"name": n, "passed": True, "reason": f"{n} ok"} for n in CHECK_NAMES]
        if check:
            checks.append({"name": check, "passed": False, "reason": reason})
        failure = None if ok else {"kind": kind, "reason": reason}
        verdict = {"accepted": ok, "checks": checks, "failure": failure, "failed_check": check}
        attempts.append({
            "slot": slot, "attempt": attempt, "skill": skill, "doc_id": docs[i]["doc_id"],
            "messages": [{"role": "user", "content": "Design an environment."}],
            "completion": f"```python\n{code}```" if code else "I cannot.", "model": "synthetic",
            "code": code, "env_id": env_id_for(code) if code else None, "accepted": ok,
            "failure_kind": kind, "failure_reason": reason, "verdict": code and verdict,
            "tool_use": False, "solution": ["forward"] * 3 if ok else [], "hint": None,
            "hint_note": None, "prompt_token_ids": [1] * 50, "token_ids": [2] * 20, "logprobs": [-0.5] * 20,
            "strategy": "splice", "parent_id": "number_hunt", "directive": "feedback",
            "spliced": ["setup", "play", "solution"],
        })  # fmt: skip
    design = StageRecord(RoundContext.open(cfg, cid, rnd), "design")
    for k in (0, 1):
        design.write_jsonl(
            f"attempt-{k}.jsonl",
            [a | {"verdict": None, "accepted": False} for a in attempts if a["attempt"] == k],
        )
    verify = StageRecord(RoundContext.open(cfg, cid, rnd), "verify")
    for a in attempts:
        if a["code"] is not None and detail:
            design.write_blob(f"code/{a['env_id']}", a["code"].encode())
            verify.write_json(f"verdicts/{a['env_id']}.json", a["verdict"])
    design.commit(seconds=STAGE_SECONDS["design"])
    verify.write_jsonl("attempts.jsonl", attempts)
    verify.commit(seconds=STAGE_SECONDS["verify"])
    for a in attempts:
        if a["accepted"]:
            a["hint"] = (
                f"Walk forward {3 + a['slot'] % 4} times; the exit never moves ({a['env_id']})."
            )
    hint = StageRecord(RoundContext.open(cfg, cid, rnd), "hint")
    keys = ("env_id", "skill", "doc_id", "tool_use", "hint", "hint_note")
    hint.write_jsonl(
        "environments.jsonl", [{k: a[k] for k in keys} for a in attempts if a["accepted"]]
    )
    hint.commit(seconds=STAGE_SECONDS["hint"])
    return attempts


def _evaluate(cfg, cid, rnd, accepted, plays, rng, detail) -> dict[str, dict[str, Any]]:
    evals = {}
    rec = StageRecord(
        RoundContext.open(cfg, cid, rnd), "evaluate", {"weights": f"r{rnd - 1:04d}-designer"}
    )
    for a in accepted:
        wins = rng.randint(0, plays)
        hinted_wins = rng.randint(wins, plays)
        ev = {
            "env_id": a["env_id"], "skill": a["skill"],
            "hinted_returns": [float(i < hinted_wins) for i in range(plays)],
            "unhinted_returns": [float(i < wins) for i in range(plays)],
            "win_rate": wins / plays, "hinted_win_rate": hinted_wins / plays,
            "regret": (hinted_wins - wins) / plays, "failed_plays": 0,
        }  # fmt: skip
        evals[a["env_id"]] = ev
        if detail:
            plays_ = [transcript(a["env_id"], 100 + i, None, i < wins) for i in range(plays)]
            plays_ += [
                transcript(a["env_id"], 100 + i, a["hint"], i < hinted_wins) for i in range(plays)
            ]
            rec.write_jsonl(f"envs/{a['env_id']}/trajectories.jsonl", plays_)
            rec.write_json(
                f"envs/{a['env_id']}/summary.json", ev | {"started": 0.0, "finished": 1.0}
            )
    rec.write_jsonl("evaluations.jsonl", list(evals.values()))
    rec.commit(seconds=STAGE_SECONDS["evaluate"])
    return evals


def _score(cfg, cid, rnd, attempts, evals) -> list[dict[str, Any]]:
    scored = []
    for i, a in enumerate(attempts):
        ev = evals.get(a["env_id"]) if a["accepted"] else None
        scored.append({
            "env_id": a["env_id"] or f"slot{a['slot']}-attempt{a['attempt']}-{i}",
            "skill": a["skill"], "accepted": a["accepted"], "failure": a["failure_kind"],
            "win_rate": ev and ev["win_rate"], "hinted_win_rate": ev and ev["hinted_win_rate"],
            "regret": ev and ev["regret"],
            "mean_return": ev and fmean(ev["unhinted_returns"]),
            "hinted_mean_return": ev and fmean(ev["hinted_returns"]),
            "reward": round(4 * ev["regret"] * ev["win_rate"] * (1 - ev["win_rate"]) if ev else -1.0, 4),
            "slot": a["slot"], "attempt": a["attempt"],
        })  # fmt: skip
    _commit(cfg, cid, rnd, "score", {"scored.jsonl": scored, "ema.json": {"planning": 0.1}})
    return scored


def _heldout(cfg, cid, rnd, rng, suites: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The held-out stage as spade.pipeline.heldout writes it: four environment files, and
    (``suites``) every task of :data:`SUITES`, some failed, with a transcript each."""
    held = [
        {"file": f"held{i}.py", "env_id": f"env-held{i}", "skill": "planning",
         "win_rate": rng.choice((0.0, 0.5, 1.0)), "mean_return": 0.5, "failed_plays": 0,
         "weights": f"r{rnd:04d}-designer"}
        for i in range(4)
    ]  # fmt: skip
    summary: dict[str, Any] = {"win_rate": fmean(h["win_rate"] for h in held), "environments": 4,
                               "mean_return": fmean(h["mean_return"] for h in held), "plays": 4,
                               "weights": f"r{rnd:04d}-designer"}  # fmt: skip
    wins = round(summary["win_rate"] * 4)  # one play a file: a file's rate is its win or not
    summary["win_rate_interval"] = interval_json(wilson_interval(wins, 4))
    summary["mean_return_interval"] = interval_json(bootstrap_interval([0.5] * 4))
    if rnd == 0:  # round 0 plays the base weights too (run.heldout_base)
        summary["base"] = {"win_rate": 0.0, "mean_return": 0.25, "environments": 4, "plays": 4,
                           "win_rate_interval": interval_json(wilson_interval(0, 4)),
                           "mean_return_interval": [0.0, 0.5], "weights": "base"}  # fmt: skip
    outputs: dict[str, Any] = {"results.jsonl": held}
    items: list[dict[str, Any]] = []
    for name, tasks in SUITES.items() if suites else ():
        rows: list[dict[str, Any]] = []
        for i, task in enumerate(tasks):
            failed = (rnd + i) % 5 == 4
            score = 0.0 if failed else rng.choice((0.0, 0.25, 1.0))
            failure = {"kind": "timeout", "reason": "step() ran past 5 s"} if failed else None
            rows.append({"suite": name, "task_id": task, "score": score,
                         "status": "env_failed" if failed else "terminated", "turns": 1 + i % 3,
                         "failure": failure})  # fmt: skip
        plays = [
            {"task_id": r["task_id"], "messages": [
                {"role": "user", "content": f"[task {r['task_id']}] Solve it (round {rnd})."},
                {"role": "assistant", "content": f"answer to {r['task_id']}"},
            ]}
            for r in rows
        ]  # fmt: skip
        outputs[f"transcripts/{name}.jsonl"] = plays
        summary.setdefault("suites", {})[name] = {
            "score": fmean(r["score"] for r in rows),
            "tasks": len(rows),
            "failed_plays": sum(1 for r in rows if r["failure"] is not None),
        }
        items += rows
    if items:
        outputs["suites.jsonl"] = items
    _commit(cfg, cid, rnd, "heldout", outputs | {"summary.json": summary})
    return summary, items


def _memory_record(a: dict[str, Any], ev: dict[str, Any], rnd: int) -> dict[str, Any]:
    return {"env_id": a["env_id"], "skill": a["skill"], "code_head": a["code"][:2000],
            "win_rate": ev["win_rate"], "regret": ev["regret"], "round": rnd,
            "hint": a["hint"], "accepted": True}  # fmt: skip


def _metrics(rnd: int, role: str, rng: random.Random) -> dict[str, float | int]:
    """:class:`spade.training.step_metrics.StepMetrics` fields, values rounded to 4 places."""
    base = 1.0 if role == "agent" else 0.6
    return {
        "step": rnd + 1, "loss": round(base / (rnd + 1) + rng.random() / 100, 4),
        "kl": round(0.01 * (rnd + 1) + rng.random() / 1000, 4),
        "clip_fraction": round(0.05 + rng.random() / 20, 4), "grad_norm": round(1 + rng.random(), 4),
        "entropy": round(2 - rnd / 10, 4), "ratio_mean": 1.0, "is_weight_mean": 1.0,
        "tokens": 4096, "trained_tokens": 1024, "samples": 16, "micro_batches": 4,
        "tokens_per_s": 900.0, "seconds": 3.5, "lr": 1e-5,
        "mismatch_kl": 0.002, "mismatch_outside": 0.001, "zero_variance_groups": 0.25,
    }  # fmt: skip
