"""A campaign's lifecycle in the object store: its id, its saved config, which round is next,
the stop request, and the lease that lets one run at a time work on a campaign id. The campaign
flow and the CLI (run, resume, status) share these."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import yaml

from spade.config import CampaignConfig
from spade.errors import ConfigError
from spade.pipeline.record import CONFIG_KEY
from spade.storage import CampaignStore, ObjectStore, RunLayout, utc_now
from spade.storage.lease import Lease

logger = logging.getLogger(__name__)
CAMPAIGN_FILE = "campaign.json"
STOP_FILE = "STOP"
TARGET_FILE = "target.json"
"""The round count the campaign's last run was asked for (what a resume continues to)."""
LEASE_FILE = "lease.json"
_held: dict[str, int] = {}  # lease URL -> how many nested holds in this process
_held_lock = threading.Lock()


def new_campaign_id(cfg: CampaignConfig) -> str:
    """``<name>-<UTC time>-<4 hex>``: sortable, unique enough, valid as a layout id."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{cfg.name}-{stamp}-{uuid.uuid4().hex[:4]}"


def start_campaign(cs: CampaignStore, cfg: CampaignConfig) -> CampaignStore:
    """Record the campaign (first start) and the config it runs with now (every start)."""
    campaign_id = cs.layout.campaign_id
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


def ensure_campaign(cs: CampaignStore, cfg: CampaignConfig) -> CampaignStore:
    """Record the campaign if this is its first round run on its own (a ``spade-round`` run)."""
    if not cs.store.exists(f"{cs.layout.campaign_prefix}/{CAMPAIGN_FILE}"):
        start_campaign(cs, cfg)
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


def rounds_to_run(
    cs: CampaignStore,
    cfg: CampaignConfig,
    rounds: int | None = None,
    more_rounds: int | None = None,
    report: Callable[[str], Any] | None = None,
) -> tuple[int, int]:
    """``(first, total)``: the round a run continues with (:func:`first_incomplete_round`)
    and the round count it stops at (0: until stopped). ``rounds``: the campaign's total;
    ``more_rounds``: the next N rounds from wherever the campaign is (a schedule's tick
    continuing a named campaign); not both. Neither: the target the campaign's last run
    recorded (:func:`record_target`: a resume continues what was asked for), else
    ``run.rounds``."""
    if rounds is not None and more_rounds is not None:
        raise ConfigError(
            f"rounds ({rounds}: the campaign's total) and more_rounds ({more_rounds}: the next"
            " rounds from where it is) both given; give one"
        )
    if more_rounds is not None and more_rounds < 1:
        raise ConfigError(f"more_rounds must be at least 1, not {more_rounds}")
    first = first_incomplete_round(cs, report=report)
    if more_rounds is not None:
        return first, first + more_rounds
    if rounds is not None:
        return first, rounds
    recorded = recorded_target(cs)
    return first, cfg.run.rounds if recorded is None else recorded


def record_target(cs: CampaignStore, total: int) -> None:
    """Record the round count this run goes to (0: until stopped) as the campaign's target."""
    key = f"{cs.layout.campaign_prefix}/{TARGET_FILE}"
    cs.store.write_json(key, {"rounds": total, "recorded": utc_now()})


def recorded_target(cs: CampaignStore) -> int | None:
    """The campaign's recorded target round count; None before any run recorded one."""
    key = f"{cs.layout.campaign_prefix}/{TARGET_FILE}"
    if not cs.store.exists(key):  # a campaign from before targets were recorded, or new
        return None
    return int(cs.store.read_json(key)["rounds"])


def first_incomplete_round(cs: CampaignStore, report: Callable[[str], Any] | None = None) -> int:
    """The round a (re)started campaign continues with: the first one not committed in full,
    or whose committed outputs do not all verify (size and sha256 against their manifests;
    each missing or corrupt object goes to ``report``)."""
    r = 0
    while round_complete(cs, r):
        if unverified := cs.unverified_stages(r):
            for stage, problems in unverified.items():
                for line in problems:
                    (report or logger.warning)(f"round {r} stage {stage}: {line}; it is recomputed")
            return r
        r += 1
    return r


def _lease(cs: CampaignStore, cfg: CampaignConfig, holder: str = "") -> tuple[Lease, str]:
    key = f"{cs.layout.campaign_prefix}/{LEASE_FILE}"
    what = f"campaign {cs.layout.campaign_id!r}"
    lease = Lease(cs.store, key, cfg.storage.lease_ttl_s, what=what, holder=holder)
    return lease, cs.store.url(key)


def check_not_running(cs: CampaignStore, cfg: CampaignConfig) -> None:
    """LeaseHeldError naming the run that holds the campaign now, if one does (the CLI's early,
    clear error; the flow's :func:`campaign_lease` is what excludes a second run)."""
    _lease(cs, cfg)[0].check_free()


@contextlib.contextmanager
def campaign_lease(cs: CampaignStore, cfg: CampaignConfig, holder: str = "") -> Iterator[None]:
    """Hold the campaign's lease while the block runs: a second run of the same campaign id
    (another process or machine) gets a LeaseHeldError naming this one (``holder``, e.g. the
    flow run, and its host and pid). Nested holds in one process (a campaign flow running its
    round flows) share the outer lease."""
    lease, url = _lease(cs, cfg, holder)
    with _held_lock:
        nested = _held.get(url, 0) > 0
        if nested:
            _held[url] += 1
    if nested:
        try:  # the outer hold renews and releases
            yield
        finally:
            with _held_lock:
                _held[url] -= 1
        return
    with lease:
        with _held_lock:
            _held[url] = 1
        try:  # the count goes with the lease
            yield
        finally:
            with _held_lock:
                del _held[url]


def request_stop(cs: CampaignStore) -> None:
    """Ask a running campaign to stop after its current round."""
    cs.store.write_json(f"{cs.layout.campaign_prefix}/{STOP_FILE}", {"requested": utc_now()})


def stop_requested(cs: CampaignStore) -> bool:
    return cs.store.exists(f"{cs.layout.campaign_prefix}/{STOP_FILE}")


def campaign_info(cs: CampaignStore) -> dict[str, Any]:
    """``campaign.json`` (id, name, created)."""
    return dict(cs.store.read_json(f"{cs.layout.campaign_prefix}/{CAMPAIGN_FILE}"))
