"""``spade pool export``'s work: a campaign's accepted environments, with their verdicts, skills,
win rates and regrets, written as a pool in the reference's layout plus a Hugging Face dataset,
so another campaign (``spade pool import``) or the reference can train on them::

    <out>/games/game_<sha256[:16]>.py     each environment's source, byte for byte
    <out>/manifest.jsonl                  a row per game: file, sha256, skill, scores, verdict
    <out>/checksums.sha256                `sha256sum -c` format
    <out>/snapshot_summary.json           the campaign, its rounds, the counts
    <out>/data/train-00000-of-00001.parquet + README.md   hub layout: datasets.load_dataset(out)
    <out>/hf/                             datasets' save_to_disk: datasets.load_from_disk

An environment is exported once (its first round's verdict), with the scores of every round
that played it (``scores``) and the last ones as ``win_rate`` / ``hinted_win_rate`` /
``regret``. Designs and pool environments both count (``source`` says which).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade.curriculum.memory import UNKNOWN_SKILL
from spade.errors import ConfigError
from spade.pipeline.record import read_jsonl
from spade.pipeline.replay import environment_rows
from spade.storage import CampaignStore, utc_now

STAGE_SOURCES = (("hint", "verify", "designed"), ("pool", "pool", "pool"))
"""(stage listing the round's environments, stage holding their verdicts, source)."""
SCORES = ("win_rate", "hinted_win_rate", "regret")
DATASET_CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/*.parquet
---
# {campaign}: exported SPADE environments

{count} environments accepted by campaign `{campaign}` (rounds {rounds}), exported by `spade pool
export`. `games/` holds each source, `manifest.jsonl` and `data/` their verdicts, skills, win
rates and regrets, `checksums.sha256` their SHA-256 (`sha256sum -c checksums.sha256`).
"""


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote."""

    campaign: str
    out: Path
    environments: int
    rounds: list[int]


def _done(cs: CampaignStore, round: int, stage: str) -> bool:
    manifest = cs.read_stage_manifest(round, stage)
    return manifest is not None and manifest.status == "completed"


def _played(cs: CampaignStore) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
    """``(round, verdict stage, source, row)`` for each environment each round handed on."""
    for round in cs.rounds():
        for stage, verdicts, source in STAGE_SOURCES:
            if _done(cs, round, stage):
                for row in environment_rows(cs, round, stage):
                    yield round, verdicts, source, row


def _verdict(cs: CampaignStore, round: int, stage: str, env_id: str) -> dict[str, Any] | None:
    key = cs.layout.stage_key(round, stage, f"verdicts/{env_id}.json")
    # a replay round's environments were verified in the round they were designed or drawn
    return cs.store.read_json(key) if cs.store.exists(key) else None


def _scores(cs: CampaignStore) -> dict[str, list[dict[str, Any]]]:
    """Per environment id, its scores in every round that scored it."""
    out: dict[str, list[dict[str, Any]]] = {}
    for round in cs.rounds():
        if not _done(cs, round, "score"):
            continue
        for row in read_jsonl(cs, cs.layout.stage_key(round, "score", "scored.jsonl")):
            if row.get("accepted") and row.get("env_id") and row.get("win_rate") is not None:
                entry = {"round": round} | {k: row.get(k) for k in SCORES}
                out.setdefault(row["env_id"], []).append(entry)
    return out


def campaign_environments(cs: CampaignStore) -> list[dict[str, Any]]:
    """The campaign's accepted environments as export rows (``code`` included), in the order
    they were first played."""
    scores = _scores(cs)
    rows: dict[str, dict[str, Any]] = {}
    for round, verdicts, source, row in _played(cs):
        env_id = row["env_id"]
        if env_id in rows:
            rows[env_id]["rounds"].append(round)
            rows[env_id]["verdict"] = rows[env_id]["verdict"] or _verdict(
                cs, round, verdicts, env_id
            )
            continue
        code = cs.store.get_blob(row["code_sha256"]).decode("utf-8")
        history = scores.get(env_id, [])
        last = history[-1] if history else {}
        rows[env_id] = {
            "name": row.get("file") or env_id,
            "env_id": env_id,
            "sha256": row["code_sha256"],
            "code": code,
            "skill": row.get("skill") or UNKNOWN_SKILL,
            "hint": row.get("hint"),
            "tool_use": bool(row.get("tool_use")),
            "source": source,
            "rounds": [round],
            **{k: last.get(k) for k in SCORES},
            "scores": history,
            "verdict": _verdict(cs, round, verdicts, env_id),
        }
    return list(rows.values())


def export_pool(cs: CampaignStore, out: Path) -> ExportSummary:
    """Write the campaign's accepted environments to ``out`` (see the module's docstring).

    Raises:
        ConfigError: the campaign accepted no environment (or does not exist), or ``out`` is a
            folder that is not empty.
    """
    rows = campaign_environments(cs)
    campaign = cs.layout.campaign_id
    if not rows:
        raise ConfigError(f"campaign {campaign!r} in {cs.store.url()} has no accepted environment")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty: export into a new folder")
    (out / "games").mkdir(parents=True, exist_ok=True)
    manifest, checksums = [], []
    for row in rows:
        rel = f"games/game_{row['sha256'][:16]}.py"
        (out / rel).write_bytes(row["code"].encode("utf-8"))
        checksums.append(f"{row['sha256']}  {rel}\n")
        manifest.append({"file": rel} | {k: v for k, v in row.items() if k != "code"})
    (out / "manifest.jsonl").write_text("".join(json.dumps(m) + "\n" for m in manifest))
    (out / "checksums.sha256").write_text("".join(checksums))
    rounds = sorted({r for row in rows for r in row["rounds"]})
    summary = {"campaign": campaign, "environments": len(rows), "rounds": rounds}
    summary |= {"exported": utc_now(), "store": cs.store.url()}
    (out / "snapshot_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    _dataset(out, manifest, rows)
    card = DATASET_CARD.format(campaign=campaign, count=len(rows), rounds=_span(rounds))
    (out / "README.md").write_text(card)
    return ExportSummary(campaign, out, len(rows), rounds)


def _span(rounds: list[int]) -> str:
    return f"{rounds[0]}-{rounds[-1]}" if len(rounds) > 1 else str(rounds[0])


def _dataset(out: Path, manifest: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """The same rows as a Hugging Face dataset: parquet in the hub's layout, and save_to_disk.
    Nested fields (verdict, scores) are JSON strings: one schema whatever a verdict holds."""
    import datasets  # heavy: only an export needs it

    records = [
        m
        | {
            "code": r["code"],
            "verdict": json.dumps(m["verdict"]),
            "scores": json.dumps(m["scores"]),
        }
        for m, r in zip(manifest, rows, strict=True)
    ]
    ds = datasets.Dataset.from_list(records)
    (out / "data").mkdir()
    ds.to_parquet(str(out / "data" / "train-00000-of-00001.parquet"))
    ds.save_to_disk(str(out / "hf"))


__all__ = ["ExportSummary", "campaign_environments", "export_pool"]
