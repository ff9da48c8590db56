"""quiet_wait: an MPI request waited on with sleeps, woken early by new work, cut short by a failure."""
import threading
import time

import pytest

from blinkflow.errors import ShutdownError
from blinkflow.backends import quiet_wait


class Request:
    """Completes at ``done_at`` (monotonic seconds); counts its tests."""

    def __init__(self, after_s):
        self.done_at = time.perf_counter() + after_s
        self.tests = 0

    def Test(self):
        self.tests += 1
        return time.perf_counter() >= self.done_at


def test_waits_until_the_request_completes_with_few_tests():
    request = Request(0.05)
    quiet_wait.wait(request)
    assert time.perf_counter() >= request.done_at
    # 20 us of spinning, then sleeps of 1/8 of the time waited: a few hundred tests, not millions.
    assert request.tests < 5000, request.tests


class FakeTime:
    """A clock that moves only when the wait sleeps or tests (each test costs ``test_s``): the
    sleeps ``until`` asks for are then the same on a loaded host as on an idle one."""

    def __init__(self, test_s=10e-6):
        self.now = 0.0
        self.test_s = test_s
        self.sleeps = []  # (when, pause asked for)

    def clock(self):
        return self.now

    def sleep(self, pause):
        self.sleeps.append((self.now, pause))
        self.now += pause


class FakeWake:
    """A ``threading.Event`` set at ``at_s`` on the fake clock: a wait across it returns then."""

    def __init__(self, time_, at_s):
        self.time, self.at_s = time_, at_s

    def wait(self, pause):
        self.time.sleeps.append((self.time.now, pause))
        if self.time.now + pause >= self.at_s:
            self.time.now = max(self.time.now, self.at_s)
            return True
        self.time.now += pause
        return False


def test_a_submission_restarts_the_sleeps_small():
    fake = FakeTime()
    done_at, wake_at = 0.3, 0.25  # new work 50 ms before the request completes

    def test():
        fake.now += fake.test_s
        return fake.now >= done_at

    quiet_wait.until(test, FakeWake(fake, wake_at), clock=fake.clock, sleep=fake.sleep)
    before = [pause for when, pause in fake.sleeps if when < wake_at]
    after = [(when, pause) for when, pause in fake.sleeps if when >= wake_at]
    # Before the wake the sleeps grew to the longest one; none is longer.
    assert before[-1] == quiet_wait.MAX_SLEEP_S, before[-5:]
    assert max(pause for when, pause in fake.sleeps) == quiet_wait.MAX_SLEEP_S
    # After it the wait spins again for its first 200 us, then sleeps small and grows anew.
    first_when, first_pause = after[0]
    assert first_when - wake_at >= quiet_wait.SPIN_S, after[:3]
    assert first_pause <= 2 * quiet_wait.SPIN_S * quiet_wait.SLEEP_FRACTION, after[:3]
    pauses = [pause for when, pause in after]
    assert pauses == sorted(pauses) and pauses[-1] == quiet_wait.MAX_SLEEP_S, pauses
    # Each sleep is a fraction of the time waited, so the request is found done promptly.
    assert fake.now - done_at <= quiet_wait.MAX_SLEEP_S + fake.test_s


def test_a_real_wake_cuts_a_sleep_short():
    """The real ``threading.Event`` path: a set wake ends the wait's sleep and the wait goes on."""
    wake = threading.Event()
    request = Request(0.05)
    threading.Timer(0.01, wake.set).start()
    quiet_wait.wait(request, wake)
    assert time.perf_counter() >= request.done_at


def test_a_failure_is_raised_instead_of_waiting_forever():
    request = Request(1e9)  # a dead peer's part never comes
    failure = []
    threading.Timer(0.05, lambda: failure.append(ShutdownError("rank 2 died"))).start()
    with pytest.raises(ShutdownError, match="rank 2 died"):
        quiet_wait.wait(request, failure=lambda: failure[0] if failure else None)
    # MPI may still write into the buffers the request holds: it is kept, never freed with them.
    assert quiet_wait.ABANDONED[-1] is request


def test_requests_let_go_of_while_pending_are_kept_until_exit():
    """A real MPI request on this process alone: a receive nobody sends to stays pending and is
    kept (freed by mpi4py with its object, a pending send that later failed would abort the job);
    a completed one is let go of."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_SELF.Dup()
    try:
        pending = comm.Irecv(np.empty(1, np.int64), source=0, tag=7)
        completed = comm.Isend(np.ones(1, np.int64), dest=0, tag=8)
        matched = comm.Irecv(np.empty(1, np.int64), source=0, tag=8)
        matched.Wait()
        before = len(quiet_wait.ABANDONED)
        quiet_wait.keep_unfinished([pending, completed])
        assert quiet_wait.ABANDONED[before:] == [pending]
        pending.Cancel()
        pending.Wait()  # cancelled: it completes, and the test lets go of it
    finally:
        quiet_wait.ABANDONED[:] = [r for r in quiet_wait.ABANDONED if r is not pending]
        comm.Free()
