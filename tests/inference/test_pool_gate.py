"""The pooled backend's version gate: stages asking for the weights in use share the backend;
a stage asking for other weights waits until those stages are done, so weights are never
switched under a stage that is playing (overlapped rounds serve two versions)."""

from __future__ import annotations

import threading

from spade.inference.pool import _Entry
from spade.records import BASE, WeightsRef

OLD = WeightsRef("r0000-agent", "file:///ckpt/0", "lora")
NEW = WeightsRef("r0001-agent", "file:///ckpt/1", "lora")


class ObservedTurn(threading.Condition):
    """The entry's condition, counting the times a stage starts waiting on it (and telling the
    test, through ``progress``). ``waits`` grows while the condition's lock is held, just before
    ``wait`` lets it go: once the test sees a new wait, taking the lock means the waiter is
    inside ``wait``, blocked, until a release notifies it."""

    def __init__(self, progress: threading.Condition) -> None:
        super().__init__()
        self.progress = progress
        self.waits = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1
        with self.progress:
            self.progress.notify_all()
        return super().wait(timeout)


def _hold_in_thread(
    entry: _Entry, weights: WeightsRef, progress: threading.Condition
) -> tuple[threading.Thread, threading.Event]:
    got = threading.Event()

    def run() -> None:
        entry.hold(weights)
        got.set()
        with progress:
            progress.notify_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


def test_other_weights_wait_for_the_stages_in_use_and_the_same_ones_share():
    """No timing: each step waits (a liveness bound only) until the waiting stage either got
    the backend or started waiting on the entry's condition, then looks at which, and at the
    entry's state under the condition's lock."""
    progress = threading.Condition()
    entry = _Entry(backend=None)
    turn = entry.turn = ObservedTurn(progress)

    def settles(got: threading.Event, waits: int) -> None:
        with progress:  # a liveness bound: the thread either gets the backend or waits
            assert progress.wait_for(lambda: got.is_set() or turn.waits >= waits, timeout=60)

    entry.hold(OLD)
    same, got_same = _hold_in_thread(entry, OLD, progress)
    settles(got_same, 1)
    assert got_same.is_set() and turn.waits == 0  # the same weights: shared, never waited
    other, got_other = _hold_in_thread(entry, NEW, progress)
    settles(got_other, 1)
    with turn:  # NEW waits inside the condition: the stages on OLD still hold the backend
        assert not got_other.is_set() and turn.waits == 1
        assert entry.held == (OLD.version, OLD.checkpoint) and entry.users == 2
    entry.release()  # wakes NEW: one stage still plays on OLD, so it waits again
    settles(got_other, 2)
    with turn:
        assert not got_other.is_set() and turn.waits == 2
        assert entry.held == (OLD.version, OLD.checkpoint) and entry.users == 1
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
