"""The pooled backend's version gate: stages asking for the weights in use share the backend;
a stage asking for other weights waits until those stages are done, so weights are never
switched under a stage that is playing (overlapped rounds serve two versions)."""

from __future__ import annotations

import threading

from spade.inference.pool import _Entry
from spade.records import BASE, WeightsRef

OLD = WeightsRef("r0000-agent", "file:///ckpt/0", "lora")
NEW = WeightsRef("r0001-agent", "file:///ckpt/1", "lora")


def _hold_in_thread(entry: _Entry, weights: WeightsRef) -> tuple[threading.Thread, threading.Event]:
    got = threading.Event()

    def run() -> None:
        entry.hold(weights)
        got.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


def test_other_weights_wait_for_the_stages_in_use_and_the_same_ones_share():
    entry = _Entry(backend=None)
    entry.hold(OLD)
    same, got_same = _hold_in_thread(entry, OLD)
    assert got_same.wait(30)  # the same weights: shared at once
    other, got_other = _hold_in_thread(entry, NEW)
    # while a stage holds OLD, NEW must not get the backend (it cannot: the wait is a
    # condition, so a short look only ever sees it still waiting)
    assert not got_other.wait(0.2)
    entry.release()
    assert not got_other.wait(0.2)  # one stage still plays on OLD
    entry.release()
    assert got_other.wait(30)  # the last OLD stage done: NEW gets it
    assert entry.held == (NEW.version, NEW.checkpoint) and entry.users == 1
    entry.release()
    assert entry.users == 0 and entry.held is None
    same.join(5)
    other.join(5)


def test_one_version_at_a_time_never_waits():
    entry = _Entry(backend=None)
    for weights in (BASE, OLD, NEW, BASE):  # sequential rounds: each stage asks, then is done
        entry.hold(weights)
        assert entry.held == (weights.version, weights.checkpoint)
        entry.release()
