"""blinkrun's job supervision against a stand-in for mpirun (a Python that prints what the ranks'
wrappers would): the earliest failure wins, event lines are hidden, a slow start or a job that
does not stop after a failure is stopped."""
import io
import sys
import time

from blinkflow.launcher.ranks import events

from blinkflow.launcher.job import supervise
from blinkflow.launcher.job.supervise import Job, describe_failure


def fake_mpirun(lines, exit_code=0, sleep=0.0):
    body = "".join(f"sys.stderr.write({line!r}); sys.stderr.flush()\n" for line in lines)
    return [sys.executable, "-c", f"import sys, time\nprint('rank output')\n{body}time.sleep({sleep})\nsys.exit({exit_code})"]


def run_job(argv, np=2, start_timeout=30.0):
    out, err = io.BytesIO(), io.BytesIO()
    began = time.time()
    status = Job(argv, {}, np=np, start_timeout=start_timeout, out=out, err=err).run()
    return status, out.getvalue().decode(), err.getvalue().decode(), time.time() - began


def started(rank):
    return events.encode({"event": "started", "rank": rank, "host": "h", "pid": 1})


def failed(rank, at, status, exc=None, blames=None):
    return events.encode({"event": "failed", "rank": rank, "host": f"host{rank}", "status": status, "signal": None,
                          "time": at, "exc": exc, "tail": ["Traceback (most recent call last):", exc or "x"],
                          "blames": blames})


def exited(rank, at, status):
    return events.encode({"event": "exited", "rank": rank, "host": "h", "status": status, "time": at})


def test_earliest_failure_is_named_and_its_status_returned():
    lines = [started(0), started(1), "mpi noise\n", failed(1, 200.0, 9), failed(0, 100.0, 4, "OSError: disk")]
    status, out, err, _ = run_job(fake_mpirun(lines, exit_code=1))
    assert status == 4
    assert out == "rank output\n"
    assert "mpi noise\n" in err and events.MARK not in err
    assert "blinkrun: rank 0 (host host0) failed first: exited with status 4: OSError: disk" in err
    assert "(1 more rank(s) failed after it)" in err


def test_mpirun_failing_without_events_passes_its_status():
    status, _, err, _ = run_job(fake_mpirun([started(0), started(1)], exit_code=3))
    assert status == 3 and "mpirun exited with status 3 and no rank reported a failure" in err


def test_ranks_that_do_not_start_in_time_stop_the_job():
    status, _, err, took = run_job(fake_mpirun([started(0)], sleep=60), start_timeout=1.0)
    assert status == 1 and took < 20
    assert "only 1 of 2 ranks started within 1 s (missing: 1)" in err


def test_a_job_still_running_after_a_failure_is_stopped(monkeypatch):
    monkeypatch.setattr(supervise, "FAILURE_GRACE_SECONDS", 0.5)
    status, _, err, took = run_job(fake_mpirun([started(0), started(1), failed(1, 1.0, 6)], sleep=60))
    assert status == 6 and took < 20 and "rank 1 (host host1) failed first" in err


def test_describe_failure_signal():
    text = describe_failure({"rank": 2, "host": "n1", "status": 137, "signal": "SIGKILL", "tail": []})
    assert text == "rank 2 (host n1) failed first: killed by SIGKILL\nblinkrun: exit status 137"


def test_sigint_stops_the_job_and_later_failures_do_not_count():
    import os
    import signal
    import threading
    lines = [started(0), started(1), failed(1, 1e12, 9)]   # fails "after" the interrupt: a casualty
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        status, _, err, took = run_job(fake_mpirun(lines, sleep=60))
    finally:
        timer.cancel()
    assert status == 130 and took < 20
    assert "blinkrun: stopped by SIGINT; every rank was stopped" in err and "failed first" not in err


def test_a_survivor_that_blames_a_peer_is_not_named_first():
    """--enable-recovery: the survivor that noticed the dead rank reported before it."""
    lines = [started(0), started(1), started(2), failed(0, 100.0, 1, "ShutdownError: peer rank 2 failed", blames=2),
             failed(2, 101.0, 137)]
    status, _, err, _ = run_job(fake_mpirun(lines, exit_code=1), np=3)
    assert status == 137 and "blinkrun: rank 2 (host host2) failed first" in err, err


def test_a_rank_that_left_with_status_0_is_named_by_its_peers():
    """os._exit(0) in one rank: it reports no failure; the ranks that stopped because of it do."""
    lines = [started(0), started(1), exited(1, 50.0, 0), failed(0, 51.0, 1, "ShutdownError: peer rank 1 failed",
                                                                blames=1)]
    status, _, err, _ = run_job(fake_mpirun(lines, exit_code=1))
    assert status == 1 and "rank 1 (host h) failed first: exited with status 0 while the others" in err, err
    assert "rank 0 (host host0) reports: ShutdownError: peer rank 1 failed" in err


def test_mpirun_failing_after_a_rank_ended_early_names_it():
    lines = [started(0), started(1), exited(1, 50.0, 0), exited(0, 52.0, 137)]
    status, _, err, _ = run_job(fake_mpirun(lines, exit_code=3))
    assert status == 3 and "no rank reported a failure, but rank 1 (host h) ended first, with status 0" in err, err


def mpi_starting(rank, at):
    return events.encode({"event": events.MPI_STARTING, "rank": rank, "host": "h", "time": at})


def test_mpirun_stopping_the_job_for_a_rank_that_ended_before_mpi_names_it_as_never_starting_mpi():
    # Open MPI's mpirun ends the job itself when a rank that never began MPI exits after another
    # began it, before blinkrun's start-up check fires: that rank is named as never starting MPI.
    lines = [started(0), started(1), started(2), mpi_starting(0, 10.0), mpi_starting(2, 10.5), exited(1, 11.0, 0),
             exited(0, 11.2, 143), exited(2, 11.3, 143)]
    status, _, err, took = run_job(fake_mpirun(lines, exit_code=1), np=3)
    assert status == 1 and took < 10, (status, took)
    assert ("rank 1 (host h) exited with status 0 without starting MPI: MPI's start-up waits for every rank, and 1 of "
            "3 ended without beginning it, so mpirun stopped the job (status 1)") in err, err
    assert "ended first" not in err


def test_an_elastic_job_whose_mpirun_waits_for_a_silent_host_is_stopped_once_its_ranks_ended(tmp_path):
    # Open MPI's mpirun waits forever for the daemon of a host that went silent; the survivors
    # said which ranks they lost and ended well: blinkrun stops mpirun, and the job succeeded
    from blinkflow.launcher.elastic.driver import ElasticDriver
    from blinkflow.launcher.elastic.spec import ElasticSpec
    said = []
    driver = ElasticDriver(ElasticSpec(min_np=1), hosts_file=str(tmp_path / "hosts.json"), hosts=[("a", 1), ("b", 1)],
                           np=2, slot_argv=lambda slot: [], wdir=str(tmp_path), say=said.append,
                           discover=lambda: {}, clock=time.monotonic)
    lines = [started(0), started(1), events.encode({"event": events.LOST, "ranks": [1]}), exited(0, 1.0, 0)]
    out, err = io.BytesIO(), io.BytesIO()
    began = time.time()
    status = Job(fake_mpirun(lines, exit_code=0, sleep=120), {}, np=2, start_timeout=30.0, out=out, err=err,
                 elastic=driver).run()
    assert status == 0, err.getvalue()
    assert time.time() - began < supervise.FAILURE_GRACE_SECONDS + supervise.STOP_GRACE_SECONDS + 10
    assert said == ["rank 1 (host b) lost: no heartbeat from it reached the other ranks, which went on without it; "
                    "host blacklisted"]


def test_mpirun_exiting_0_after_stopping_ranks_is_not_a_success():
    # Open MPI 5 ends a job whose host's daemon it lost, then exits 0; its ranks were stopped
    status, _, err, _ = run_job(fake_mpirun([started(0), started(1), exited(0, 1.0, 0)], exit_code=0))
    assert status == 1, err
    assert "rank(s) 1 (host h) did not end on their own" in err, err


def test_a_lost_daemon_is_named_with_its_host_and_ranks():
    # mpirun prints PRRTE's message on its stdout; the ranks on the lost host report nothing
    lines = [events.encode({"event": "started", "rank": r, "host": h, "pid": 1})
             for r, h in ((0, "bfa"), (1, "bfa"), (2, "bfb"), (3, "bfb"))]
    body = "".join(f"sys.stderr.write({line!r})\n" for line in lines)
    said = "A daemon failed to report back after being spawned.\\n  Local host:    bfa\\n  Remote host:   bfb\\n"
    argv = [sys.executable, "-c", f"import sys\n{body}sys.stderr.flush()\nprint('{said}')\nsys.exit(255)"]
    status, out, err, _ = run_job(argv, np=4)
    assert status == 255 and "Remote host:   bfb" in out
    assert ("mpirun exited with status 255 after it lost its Open MPI daemon on host bfb (running ranks 2, 3)" in err)
    assert "no rank reported a failure of its own" in err


def test_what_is_left_of_mpiruns_session_ends_before_blinkrun_returns(tmp_path):
    # a rank wrapper that outlives mpirun (stopping its rank) is in mpirun's session
    marker = tmp_path / "child.pid"
    code = ("import subprocess, sys\n"
            f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(marker)!r}, 'w').write(str(child.pid))\nsys.exit(0)")
    status, _, _, took = run_job([sys.executable, "-c", code], np=0)
    pid = int(marker.read_text())
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z"), state
    assert took < supervise.STOP_GRACE_SECONDS + 10
