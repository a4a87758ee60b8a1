"""A campaign's lifecycle in the object store: its id, its saved config, which round is next,
and the stop request. The campaign flow and the CLI (run, resume, status) share these."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

import yaml

from spade.config import CampaignConfig
from spade.errors import ConfigError
from spade.pipeline.record import CONFIG_KEY, campaign_store
from spade.storage import CampaignStore, ObjectStore, RunLayout, utc_now

CAMPAIGN_FILE = "campaign.json"
STOP_FILE = "STOP"


def new_campaign_id(cfg: CampaignConfig) -> str:
    """``<name>-<UTC time>-<4 hex>``: sortable, unique enough, valid as a layout id."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{cfg.name}-{stamp}-{uuid.uuid4().hex[:4]}"


def start_campaign(cfg: CampaignConfig, campaign_id: str) -> CampaignStore:
    """Record the campaign (first start) and the config it runs with now (every start)."""
    cs = campaign_store(cfg, campaign_id)
    prefix = cs.layout.campaign_prefix
    if not cs.store.exists(f"{prefix}/{CAMPAIGN_FILE}"):
        cs.store.write_json(
            f"{prefix}/{CAMPAIGN_FILE}",
            {"campaign_id": campaign_id, "name": cfg.name, "created": utc_now()},
        )
    cs.store.write_bytes(f"{prefix}/{CONFIG_KEY}", cfg.resolved_yaml().encode())
    if cs.store.exists(f"{prefix}/{STOP_FILE}"):  # a new start clears an old stop request
        cs.store.delete(f"{prefix}/{STOP_FILE}")
    return cs


def ensure_campaign(cfg: CampaignConfig, campaign_id: str) -> CampaignStore:
    """Record the campaign if this is its first round run on its own (a ``spade-round`` run)."""
    cs = campaign_store(cfg, campaign_id)
    if not cs.store.exists(f"{cs.layout.campaign_prefix}/{CAMPAIGN_FILE}"):
        start_campaign(cfg, campaign_id)
    return cs


def saved_config(store: ObjectStore, campaign_id: str) -> CampaignConfig:
    """The config a campaign last ran with (what ``spade resume`` continues with)."""
    key = f"{RunLayout(campaign_id).campaign_prefix}/{CONFIG_KEY}"
    try:  # absent: no such campaign in this store
        text = store.read_bytes(key).decode()
    except FileNotFoundError as exc:
        raise ConfigError(
            f"no campaign {campaign_id!r} in {store.url()} (no {key}); check the id and --store"
        ) from exc
    return CampaignConfig.model_validate(yaml.safe_load(text))


def list_campaigns(store: ObjectStore) -> list[str]:
    """Campaign ids in a store, sorted."""
    ids = set()
    for key in store.list("campaign"):
        if m := re.fullmatch(r"campaign/([^/]+)/" + re.escape(CAMPAIGN_FILE), key):
            ids.add(m[1])
    return sorted(ids)


def round_complete(cs: CampaignStore, round: int) -> bool:
    """Every stage of the round is committed (completed or skipped)."""
    return len(cs.completed_stages(round)) == len(cs.layout.stages)


def first_incomplete_round(cs: CampaignStore) -> int:
    """The round a (re)started campaign continues with."""
    r = 0
    while round_complete(cs, r):
        r += 1
    return r


def request_stop(cs: CampaignStore) -> None:
    """Ask a running campaign to stop after its current round."""
    cs.store.write_json(f"{cs.layout.campaign_prefix}/{STOP_FILE}", {"requested": utc_now()})


def stop_requested(cs: CampaignStore) -> bool:
    return cs.store.exists(f"{cs.layout.campaign_prefix}/{STOP_FILE}")


def campaign_info(cs: CampaignStore) -> dict[str, Any]:
    """``campaign.json`` (id, name, created)."""
    return dict(cs.store.read_json(f"{cs.layout.campaign_prefix}/{CAMPAIGN_FILE}"))
