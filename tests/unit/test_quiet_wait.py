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


def test_a_submission_restarts_the_sleeps_small():
    wake = threading.Event()

    class Watched(Request):
        after_wake = 0

        def Test(self):
            self.after_wake += wake.is_set()
            return super().Test()

    request = Watched(0.3)
    threading.Timer(0.25, wake.set).start()  # new work 50 ms before the request completes
    quiet_wait.wait(request, wake)
    # Before the wake the tests came a millisecond apart (the longest sleep); after it the wait
    # spins again for its first 200 us, so the last 50 ms see far more than 50 tests.
    assert request.after_wake > 100, request.after_wake


def test_a_failure_is_raised_instead_of_waiting_forever():
    request = Request(1e9)  # a dead peer's part never comes
    failure = []
    threading.Timer(0.05, lambda: failure.append(ShutdownError("rank 2 died"))).start()
    with pytest.raises(ShutdownError, match="rank 2 died"):
        quiet_wait.wait(request, failure=lambda: failure[0] if failure else None)
    # MPI may still write into the buffers the request holds: it is kept, never freed with them.
    assert quiet_wait.ABANDONED[-1] is request
