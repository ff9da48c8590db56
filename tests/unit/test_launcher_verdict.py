"""The rank blinkrun names first is the one that failed on its own, not a casualty that says
whom it stopped because of (issue 18, finding 8)."""
from blinkflow.launcher.job import verdict


def failure(rank, at, blames=None, status=1, exc="x"):
    return {"rank": rank, "host": f"h{rank}", "time": at, "blames": blames, "status": status, "exc": exc}


def test_a_casualty_that_reported_first_is_not_named():
    killed = failure(2, 10.0, status=137)
    survivor = failure(0, 9.5, blames=2, exc="ShutdownError: peer rank 2 on h2 failed")
    assert verdict.first_cause([survivor, killed]) is killed


def test_blaming_oneself_is_an_own_failure():
    own = failure(1, 5.0, blames=1)
    assert verdict.first_cause([failure(0, 4.0, blames=1), own]) is own


def test_when_every_failure_is_a_casualty_the_blamed_rank_is_named():
    failures = [failure(0, 7.0, blames=2, exc="ShutdownError: peer rank 2 failed"), failure(1, 8.0, blames=2)]
    assert verdict.first_cause(failures) is None and verdict.blamed_rank(failures) == 2
    exits = {2: {"rank": 2, "host": "h2", "status": 0, "time": 6.0}}
    text = verdict.describe_blamed(2, failures, exits)
    assert text.startswith("rank 2 (host h2) failed first: exited with status 0 while the others still ran")
    assert "rank 0 (host h0) reports: ShutdownError: peer rank 2 failed" in text
    unheard = verdict.describe_blamed(2, failures, {}, {0: "h0", 1: "h0", 2: "h2"})
    # a rank cut off by the network, or stopped: blinkrun says what it saw, and where, not a cause
    assert unheard.startswith("rank 2 (host h2) failed first: blinkrun heard neither a failure nor an end from it")


def test_the_first_exit():
    exits = {0: {"rank": 0, "time": 5.0}, 3: {"rank": 3, "time": 2.0}}
    assert verdict.first_exit(exits)["rank"] == 3 and verdict.first_exit({}) is None
