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
import threading
import time
from typing import Any

import pytest

from spade.config import load_config
from spade.errors import LeaseHeldError
from spade.pipeline.campaign import LEASE_FILE, campaign_lease
from spade.pipeline.record import campaign_store
from spade.storage import ObjectStore
from spade.storage import lease as lease_module
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


class LeaseClock:
    """The lease module's ``time``, with a ``time()`` the test moves: expiry is judged by the
    lease's own clock, so a slow machine cannot let a lease lapse between two renewals."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def time(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:  # strftime, gmtime, ...: the real ones
        return getattr(time, name)


def test_the_holder_renews_it_past_its_ttl(store, monkeypatch):
    """The holder keeps the lease two TTLs past its start by renewing it. The lease's clock is
    moved half a TTL at a time, and after each move the test waits for a renewal at the new
    time (the renewal thread ticks every TTL / 3 of real time; the wait is a liveness bound):
    the lease object then expires a TTL after it, and a second taker is refused. On the real
    clock, renewing in time is the thread's period: it asks to sleep at most half a TTL."""
    clock = LeaseClock()
    monkeypatch.setattr(lease_module, "time", clock)
    renewed = threading.Condition()
    renewals: list[float] = []  # each renewal's time, as the lease object it wrote says
    real_renew = Lease.renew

    def counted_renew(self: Lease) -> None:
        real_renew(self)
        written = json.loads(self.store.read_bytes(self.key))["acquired"]
        with renewed:
            renewals.append(written)
            renewed.notify_all()

    monkeypatch.setattr(Lease, "renew", counted_renew)
    ttl = 0.3
    lease = Lease(store, KEY, ttl)
    ticks: list[float | None] = []  # the real time the renewal thread sleeps between renewals

    class TimedStop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            ticks.append(timeout)
            return super().wait(timeout)

    lease._stop = TimedStop()
    with lease as held:
        start = json.loads(store.read_bytes(KEY))
        assert start["expires"] == clock.now + ttl
        for _ in range(4):  # 4 x ttl / 2: two TTLs past the start, none expired in between
            with renewed:
                clock.now += ttl / 2
                assert renewed.wait_for(lambda: renewals[-1:] == [clock.now], timeout=60)
        record = json.loads(store.read_bytes(KEY))
        assert record["owner"] == held.owner and record["acquired"] == clock.now
        assert record["expires"] == clock.now + ttl and clock.now > start["expires"]
        with pytest.raises(LeaseHeldError):
            Lease(store, KEY, ttl).acquire()
        assert held.lost is None
    # on a real clock the renewals come at least twice per TTL (every third of it)
    assert ticks and all(t is not None and t <= ttl / 2 for t in ticks), ticks


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
from spade.storage import lease as lease_module
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
