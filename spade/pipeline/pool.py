"""The pool stage: environments from a fixed pool of environment files, beside or instead of
designs.

A round's pool stage (between ``hint`` and ``evaluate``) does one of three things:

- **pool mode** (``run.env_source: pool``, the reference's fixed-environment GRPO baseline): a
  regeneration round designs nothing (:func:`skip_design` commits the design-side stages as
  skipped) and plays ``designer.envs_per_round`` environments drawn from the pool;
- **fill** (``run.min_envs``): a designed regeneration round that accepted fewer designs than
  ``min_envs`` plays pool environments up to ``min_envs``, so every round plays and trains; and
  at least ``run.pool_envs_min`` of them however many designs it accepted (a round whose
  designs all score 0 on every play still trains the agent);
- **replay**: a replay round (:mod:`spade.pipeline.replay`) plays the pool environments of the
  regeneration it replays again, as it does the designs.

The pool (:func:`pool_envs`) is ``run.env_pool`` (files, folders, or ``pool:<name>``: the
accepted environments of a pool ``spade pool import`` stored in ``storage.root``, each verified
again in the round with the checks its import waived still waived; default: the bundled
:mod:`spade.envs.examples`) less every environment of ``run.heldout_envs``, matched by path and
by code: a held-out environment is never trained on. The draw (:func:`draw`) is a permutation of
the pool seeded by the master seed and the regeneration, without the round's accepted designs
(same code, same environment): it is walked in order, each candidate verified in the jail like a
design (the flow caches verdicts by code), so a pool file that fails verification is replaced by
the next one, and no environment is played twice in a round.

Hints: the class's declared ``hint`` (written with the environment, so it knows the answer's
shape, costs no inference and stays the same every round, which keeps the pool's regret
comparable across rounds), else the designer's hint prompt, as for a design. Pool environments
are played and the agent trains on them; the designer is never rewarded for them, and they do
not enter the environment memory (it holds the designer's own designs: its examples and
negatives are about what it wrote; a fixed pool meant as examples goes in ``memory.seed_pool``).
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spade.config import CampaignConfig
from spade.config.pools import pool_ref
from spade.curriculum.memory import UNKNOWN_SKILL, read_declarations
from spade.curriculum.pool import env_files
from spade.curriculum.stored import pool_digest, read_pool, store_for
from spade.designer.designer import env_id_for, hint_designs, verify_design
from spade.errors import ConfigError
from spade.inference.base import Backend
from spade.pipeline.context import RoundContext
from spade.pipeline.heldout import heldout_files
from spade.pipeline.inputs import env_files_digest
from spade.pipeline.record import StageRecord
from spade.pipeline.replay import PLAN_FILE, RoundPlan, environment_rows
from spade.pipeline.stage import Stage
from spade.records import DesignAttempt, EnvSpec, Verdict
from spade.storage import CampaignStore, ObjectStore

log = logging.getLogger(__name__)
NAME = "pool"
ENVIRONMENTS = "environments.jsonl"
DESIGN_SIDE = ("design", "verify", "hint")


@dataclass(frozen=True)
class PoolEnv:
    """One environment of the pool (read as text; it only ever runs in the jail)."""

    name: str  # the file's stem (a stored pool's: its name in the imported source)
    code: str
    env_id: str
    skill: str
    hint: str | None  # the class's declared hint, if any
    waive: tuple[str, ...] = ()  # checks its import waived (VerifyConfig.waive), stored pools


def pool_entries(cfg: CampaignConfig) -> list[str]:
    """``run.env_pool`` as a list of entries (paths, ``pool:<name>``), or the bundled
    examples' folder."""
    pool = cfg.run.env_pool
    if pool is not None:
        return [pool] if isinstance(pool, str) else list(pool)
    from spade.envs.examples import example_paths  # stdlib only: cheap

    return [str(example_paths()[0].parent)]


def describe_pool(cfg: CampaignConfig) -> str:
    """The pool's entries as one string, for messages."""
    return ", ".join(pool_entries(cfg))


def pool_digest_of(cfg: CampaignConfig) -> str:
    """What the pool's entries hold, as one digest (a cache key's input): each file's path and
    sha256, each stored pool's name and index digest (its index names every source's sha256)."""
    h = hashlib.sha256()
    entries = pool_entries(cfg)
    store = store_for(entries, cfg.storage)
    for entry in entries:
        if (name := pool_ref(entry)) is not None:
            assert store is not None
            h.update(f"pool:{name}\0{pool_digest(store, name)}\0".encode())
            continue
        h.update(f"files\0{env_files_digest([entry], 'run.env_pool')}\0".encode())
    return h.hexdigest()


def _entry_envs(entry: str, store: ObjectStore | None) -> list[PoolEnv]:
    """The environments one ``run.env_pool`` entry names, in order."""
    if (name := pool_ref(entry)) is not None:
        assert store is not None
        return [
            PoolEnv(e.name, code, env_id_for(code), e.skill, e.hint, tuple(e.waived))
            for e, code in read_pool(store, name)
        ]
    out = []
    for path in env_files([entry], "run.env_pool"):
        code = path.read_text(encoding="utf-8")
        found = read_declarations(code)
        skill, hint = found.get("skill", UNKNOWN_SKILL), found.get("hint")
        out.append(PoolEnv(path.stem, code, env_id_for(code), skill, hint))
    return out


def pool_envs(cfg: CampaignConfig) -> list[PoolEnv]:
    """The pool: its files (each folder's sorted by name, in the order of ``run.env_pool``)
    less the held-out environments; a file listed twice counts once.

    Raises:
        ConfigError: the pool is missing, or nothing is left once the held-out ones are out.
    """
    held_ids = {env_id_for(p.read_text(encoding="utf-8")) for p in heldout_files(cfg)}
    out: list[PoolEnv] = []
    # held out (a held-out file in the pool folder has its code), or already in the pool
    taken = set(held_ids)
    entries = pool_entries(cfg)
    store = store_for(entries, cfg.storage)
    for entry in entries:
        for env in _entry_envs(entry, store):
            if env.env_id not in taken:
                taken.add(env.env_id)
                out.append(env)
    check_not_held_out(out, held_ids)
    if not out:
        raise ConfigError(
            f"run.env_pool: no environment in {describe_pool(cfg)} that is not held out"
            " (run.heldout_envs)"
        )
    return out


def check_not_held_out(pool: Sequence[PoolEnv], held_ids: set[str]) -> None:
    """Fail loudly if a held-out environment is in the pool: it would be trained on."""
    leaked = sorted(p.name for p in pool if p.env_id in held_ids)
    if leaked:
        raise RuntimeError(f"held-out environments in the training pool: {leaked}")


def draw(pool: Sequence[PoolEnv], seed: int, regeneration: int, exclude: set[str]) -> list[PoolEnv]:
    """The pool in a seeded order for ``regeneration``, without the environments in ``exclude``
    (env ids) and without repeats (two files with the same code are one environment)."""
    seen = set(exclude)
    order = []
    for env in pool:
        if env.env_id not in seen:
            seen.add(env.env_id)
            order.append(env)
    random.Random(f"{seed}:pool:{regeneration}").shuffle(order)
    return order


def wanted(cfg: CampaignConfig, accepted: int) -> tuple[int, str]:
    """How many pool environments a regeneration round plays, and why none when none."""
    if cfg.run.env_source == "pool":
        return cfg.designer.envs_per_round, ""
    run = cfg.run
    if run.min_envs == 0 and run.pool_envs_min == 0:
        return 0, "run.min_envs and run.pool_envs_min are 0: only designs are played"
    need = max(run.min_envs - accepted, run.pool_envs_min)
    if need <= 0:
        return 0, f"{accepted} designs accepted (run.min_envs {run.min_envs})"
    return need, ""


def candidates(
    cfg: CampaignConfig, plan: RoundPlan, accepted_ids: Sequence[str]
) -> tuple[int, list[PoolEnv], str]:
    """``(needed, candidates in draw order, why none)`` for a regeneration round whose accepted
    designs are ``accepted_ids``."""
    need, why = wanted(cfg, len(accepted_ids))
    if need == 0:
        return 0, [], why
    return need, draw(pool_envs(cfg), cfg.seed, plan.regeneration, set(accepted_ids)), ""


def verify_pool_env(ctx: RoundContext, code: str, waive: Sequence[str] = ()) -> Verdict:
    """The verifier's checks on one pool environment, in the jail (as for a design), with the
    checks its import waived (``waive``) waived; it writes nothing, so its verdict depends on
    the config, the policy, ``waive`` and the code alone."""
    return verify_design(code, ctx.config, ctx.policy, waive=waive)


def needs_model(chosen: Sequence[tuple[PoolEnv, Verdict]]) -> bool:
    """Whether a chosen environment declares no hint, so the model must write one."""
    return any(env.hint is None for env, _ in chosen)


async def fill(
    ctx: RoundContext,
    need: int,
    chosen: list[tuple[PoolEnv, Verdict]],
    rejected: list[tuple[PoolEnv, Verdict]],
    backend: Backend | None,
) -> list[EnvSpec]:
    """Hint the ``chosen`` (verified) pool environments and commit the stage.

    ``rejected``: candidates the verifier turned down (kept with their verdicts, as data).
    ``backend`` writes hints for environments that declare none (None when all declare one).
    """
    cfg, round = ctx.config, ctx.round
    rec = StageRecord(ctx, NAME, {"need": str(need)})
    for env, verdict in [*chosen, *rejected]:
        extra = {"failed_check": verdict.failed_check, "file": env.name}
        rec.write_json(f"verdicts/{env.env_id}.json", verdict.to_dict() | extra)
    hinted = await _hints(cfg, chosen, backend)
    rows = []
    for (env, verdict), (hint, origin, note) in zip(chosen, hinted, strict=True):
        rows.append(
            {
                "env_id": env.env_id,
                "file": env.name,
                "skill": env.skill,
                "tool_use": verdict.tool_use,
                "code_sha256": rec.write_blob(f"code/{env.env_id}", env.code.encode()),
                "hint": hint,
                "hint_source": origin,
                "hint_note": note,
                "source": "pool",
            }
        )
    rec.write_jsonl(ENVIRONMENTS, rows)
    note = f"{len(rows)} of {need} pool environments"
    if rejected:
        note += f"; rejected by the verifier: {', '.join(e.name for e, _ in rejected)}"
        log.warning("round %d: pool environments rejected: %s", round, note)
    rec.commit(note=note)
    return [_spec(row, env.code) for row, (env, _) in zip(rows, chosen, strict=True)]


async def _hints(
    cfg: CampaignConfig, chosen: list[tuple[PoolEnv, Verdict]], backend: Backend | None
) -> list[tuple[str | None, str | None, str | None]]:
    """``(hint, "declared" | "model" | None, note)`` per chosen environment."""
    asks = [
        DesignAttempt(
            slot=i,
            attempt=0,
            skill=env.skill,
            doc_id=f"pool:{env.name}",
            messages=[],
            code=env.code,
            env_id=env.env_id,
            accepted=True,
            solution=list(verdict.solution),
        )
        for i, (env, verdict) in enumerate(chosen)
        if env.hint is None
    ]
    if asks:
        if backend is None:
            raise ValueError("pool environments without a declared hint need a backend")
        await hint_designs(asks, backend, cfg)
    by_id = {a.env_id: a for a in asks}
    out: list[tuple[str | None, str | None, str | None]] = []
    for env, _ in chosen:
        if env.hint is not None:
            out.append((env.hint, "declared", None))
        else:
            ask = by_id[env.env_id]
            out.append((ask.hint, "model" if ask.hint else None, ask.hint_note))
    return out


def _spec(row: dict[str, Any], code: str) -> EnvSpec:
    return EnvSpec(row["env_id"], code, row["skill"], row["hint"], bool(row["tool_use"]), "pool")


def skip(ctx: RoundContext, reason: str) -> list[EnvSpec]:
    """Commit the stage as skipped (no pool environment this round)."""
    rec = StageRecord(ctx, NAME)
    rec.write_jsonl(ENVIRONMENTS, [])
    rec.commit("skipped", reason)
    return []


def pool_rows(cs: CampaignStore, round: int) -> list[dict[str, Any]]:
    """The pool environments round ``round`` played (none before this stage existed)."""
    return environment_rows(cs, round, NAME)


def replay(ctx: RoundContext, plan: RoundPlan) -> list[EnvSpec]:
    """A replay round's pool stage: the pool environments of the regeneration it replays, with
    their hints (their code is already stored: only named here)."""
    if plan.replay_of is None:
        raise ValueError(f"round {ctx.round}: plan {plan} designs; nothing to replay")
    rows = pool_rows(ctx.store, plan.replay_of)
    note = f"replays the pool environments of round {plan.replay_of}"
    if not rows:
        return skip(ctx, f"round {plan.replay_of} played no pool environment")
    rec = StageRecord(ctx, NAME, {"replay_of": str(plan.replay_of)})
    for row in rows:
        rec.outputs[f"code/{row['env_id']}"] = row["code_sha256"]
    rec.write_jsonl(ENVIRONMENTS, rows)
    rec.commit(note=note)
    return [_spec(r, rec.cs.store.get_blob(r["code_sha256"]).decode("utf-8")) for r in rows]


def skip_design(ctx: RoundContext, plan: RoundPlan) -> list[DesignAttempt]:
    """Pool mode's design half of a regeneration round: the plan recorded, the design-side
    stages committed as skipped; no design attempt."""
    note = "run.env_source is pool: nothing is designed"
    rec = StageRecord(ctx, "sample_documents")
    rec.write_json(PLAN_FILE, plan.to_dict())
    rec.commit("skipped", note)
    for stage in DESIGN_SIDE:
        StageRecord(ctx, stage).commit("skipped", note)
    return []


def take(
    need: int, batch: Sequence[PoolEnv], verdicts: Sequence[Verdict]
) -> tuple[list[tuple[PoolEnv, Verdict]], list[tuple[PoolEnv, Verdict]]]:
    """Split verified candidates into accepted (at most ``need``, in draw order) and rejected."""
    chosen: list[tuple[PoolEnv, Verdict]] = []
    rejected: list[tuple[PoolEnv, Verdict]] = []
    for env, verdict in zip(batch, verdicts, strict=True):
        if verdict.accepted and len(chosen) < need:
            chosen.append((env, verdict))
        elif not verdict.accepted:
            rejected.append((env, verdict))
    return chosen, rejected


STAGE = Stage(
    "pool",
    sections=(
        "seed",
        "model",
        "designer",
        "sandbox",
        "run.env_source",
        "run.env_pool",
        "run.min_envs",
        "run.pool_envs_min",
        "run.heldout_envs",
    ),
    entries=("fill", "needs_model", "replay", "skip", "spade.inference.pool:shared_backend"),
)


__all__ = [
    "PoolEnv",
    "candidates",
    "check_not_held_out",
    "describe_pool",
    "draw",
    "fill",
    "needs_model",
    "pool_digest_of",
    "pool_entries",
    "pool_envs",
    "pool_rows",
    "replay",
    "skip",
    "skip_design",
    "take",
    "verify_pool_env",
    "wanted",
]
