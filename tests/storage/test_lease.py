"""One run per campaign id: the store lease (local folder and S3 through moto's conditional
writes) refuses a second holder, naming the first, renews itself, and is taken over when its
holder is gone (expired, or a killed process of this host)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from spade.config import load_config
from spade.errors import LeaseHeldError
from spade.pipeline.campaign import LEASE_FILE, campaign_lease
from spade.pipeline.record import campaign_store
from spade.storage import ObjectStore
from spade.storage.lease import Lease

KEY = "campaign/c1/lease.json"


@pytest.mark.attack
def test_a_second_holder_is_refused_naming_the_first(store):
    with Lease(store, KEY, 60, what="campaign 'c1'") as first:
        second = Lease(store, KEY, 60, what="campaign 'c1'")
        with pytest.raises(LeaseHeldError, match=r"campaign 'c1' is held by .*pid \d+ on") as err:
            second.acquire()
        assert first.owner in str(err.value)
    assert not store.exists(KEY)  # released
    with Lease(store, KEY, 60):  # free again
        pass


def test_the_holder_renews_it_past_its_ttl(store):
    with Lease(store, KEY, 2) as held:
        time.sleep(3.5)  # renewed every 2/3 s: still held
        with pytest.raises(LeaseHeldError):
            Lease(store, KEY, 2).acquire()
        assert held.lost is None


def test_an_expired_lease_is_taken_over(store):
    stale = Lease(store, KEY, 2)
    stale.acquire()  # taken, never renewed (its holder hung)
    with pytest.raises(LeaseHeldError):
        Lease(store, KEY, 2).acquire()
    time.sleep(2.2)
    taker = Lease(store, KEY, 60)
    taker.acquire()
    assert json.loads(store.read_bytes(KEY))["owner"] == taker.owner
    with pytest.raises(LeaseHeldError, match="lost the lease"):
        stale.renew()  # the old holder learns it lost it
    stale.release()  # not ours any more: left alone
    assert json.loads(store.read_bytes(KEY))["owner"] == taker.owner
    taker.release()


HOLD = """
import sys, time
from spade.storage import ObjectStore
from spade.storage.lease import Lease
store = ObjectStore(sys.argv[1], {opts})
Lease(store, {key!r}, 3600).acquire()
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.attack
def test_a_killed_holders_lease_is_taken_over_at_once(store, tmp_path):
    """SIGKILL leaves the lease object behind for an hour; its pid is gone on this host."""
    code = HOLD.format(opts=repr(store.storage_options), key=KEY)
    child = subprocess.Popen(
        [sys.executable, "-c", code, store.url()], stdout=subprocess.PIPE, text=True
    )
    try:  # kill it once it holds the lease
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with pytest.raises(LeaseHeldError, match=f"pid {child.pid} on {socket.gethostname()}"):
            Lease(store, KEY, 60).acquire()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert store.exists(KEY)
    with Lease(store, KEY, 60):
        pass


def test_campaign_lease_is_shared_by_nested_holds_in_one_process(tmp_path):
    cfg = load_config(overrides={"storage.root": str(tmp_path), "storage.lease_ttl_s": 60})
    store = ObjectStore(str(tmp_path))
    key = f"campaign/c1/{LEASE_FILE}"
    with campaign_lease(campaign_store(cfg, "c1"), cfg):
        owner = json.loads(store.read_bytes(key))["owner"]
        with campaign_lease(
            campaign_store(cfg, "c1"), cfg
        ):  # the round flow inside the campaign flow
            assert json.loads(store.read_bytes(key))["owner"] == owner
        assert store.exists(key)  # the inner hold does not release it
        with pytest.raises(LeaseHeldError, match="campaign 'c1' is held by"):
            Lease(store, key, 60, what="campaign 'c1'").acquire()
    assert not store.exists(key)
