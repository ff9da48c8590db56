"""The raw-lock primitives on the runtime's critical path: Doorbell (an Event for one waiter) and
Slot (a result set once, waited on from any thread)."""
import threading
import time

from blinkflow.runtime.doorbell import Doorbell
from blinkflow.runtime.handles import Slot


def test_a_doorbell_stays_set_until_cleared_like_an_event():
    bell = Doorbell()
    assert not bell.is_set() and not bell.wait(0.01) and not bell.wait(0)
    bell.set()
    bell.set()  # twice is once
    assert bell.is_set() and bell.wait(0.01) and bell.wait(0.01) and bell.wait(0)
    bell.clear()
    bell.clear()
    assert not bell.is_set() and not bell.wait(0.01)


def test_a_doorbell_wakes_a_sleeping_thread_at_once():
    bell = Doorbell()
    woke = []

    def sleeper():
        start = time.monotonic()
        woke.append((bell.wait(5.0), time.monotonic() - start))

    thread = threading.Thread(target=sleeper)
    thread.start()
    time.sleep(0.05)
    bell.set()
    thread.join(5)
    assert woke and woke[0][0] and woke[0][1] < 2.0, woke


def test_a_slot_keeps_its_first_outcome_and_wakes_every_waiter():
    slot = Slot()
    assert not slot.done() and not slot.wait(0.01)
    seen = []
    waiters = [threading.Thread(target=lambda: seen.append(slot.wait(5.0))) for _ in range(3)]
    for w in waiters:
        w.start()
    time.sleep(0.05)
    slot.set_result(41)
    slot.set_error(RuntimeError("late"))  # a failure after the result loses
    slot.set_result(42)
    for w in waiters:
        w.join(5)
    assert seen == [True, True, True]
    assert slot.done() and slot.wait(0) and slot.result == 41 and slot.error is None


def test_a_slot_failed_first_reports_the_error_only():
    slot = Slot()
    error = RuntimeError("peer died")
    slot.set_error(error)
    slot.set_result(1)
    assert slot.wait(0.01) and slot.error is error and slot.result is None
