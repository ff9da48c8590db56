"""Issue 18, finding 8: the first failure is named correctly (see first_failure_script.py)."""
import os
import re

import pytest

from blinkrun_helpers import PY, run_blinkrun
from harness import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "first_failure_script.py")


@pytest.mark.mpi
def test_under_recovery_a_survivor_that_left_first_is_not_blamed():
    """Before, a survivor that saw the dead rank and a survivor that had left in one look blamed
    both, and ShutdownError.rank named the survivor (the lower rank)."""
    proc = run_ranks(3, ["python", CASES, "recovery"], timeout=120, check=False, mpi_options=["--enable-recovery"])
    caught = re.findall(r"^CAUGHT rank (\d) rank=(\S+): (.*)$", proc.stdout, re.M)
    assert sorted(r for r, _, _ in caught) == ["0", "1"], proc.stdout + proc.stderr[-3000:]
    for _, blamed, text in caught:
        assert blamed == "2" and "rank 2 on" in text and "rank 0 on" not in text, text


@pytest.mark.mpi
def test_under_recovery_blinkrun_names_the_killed_rank():
    proc = run_blinkrun(["-np", "3", "--mpi-args", "--enable-recovery", PY, CASES, "killed"], timeout=120)
    assert "blinkrun: rank 2 (host " in proc.stderr and "failed first: killed by SIGKILL" in proc.stderr, \
        proc.stderr[-3000:]
    assert proc.returncode == 137, proc.stderr[-3000:]


@pytest.mark.mpi
def test_a_rank_leaving_with_status_0_is_named():
    """Before: 'mpirun exited with status ... and no rank reported a failure'."""
    proc = run_blinkrun(["-np", "3", PY, CASES, "exit0"], timeout=120)
    err = proc.stderr
    assert proc.returncode != 0, err[-3000:]
    named = re.search(r"blinkrun: rank 2 \(host [^)]*\) failed first: exited with status 0", err) or \
        re.search(r"but rank 2 \(host [^)]*\) ended first, with status 0", err)
    assert named and "no rank reported a failure\n" not in err, err[-3000:]


@pytest.mark.mpi
def test_peers_hear_why_a_crashed_rank_left():
    """Before: 'rank 2: shutdown() was called' for a rank that died of an uncaught exception."""
    proc = run_ranks(3, ["python", CASES, "uncaught"], timeout=120, check=False)
    caught = re.findall(r"^CAUGHT rank (\d) rank=(\S+): (.*)$", proc.stdout, re.M)
    assert sorted(int(r) for r, _, _ in caught) == [0, 1], proc.stdout + proc.stderr[-3000:]
    for _, blamed, text in caught:
        assert blamed == "2" and "shutdown() was called" not in text, text
        assert "rank 2: its process is exiting after an uncaught ValueError: rank 2 fails on purpose" in text, text
        assert "init() again" not in text, text


@pytest.mark.mpi
def test_a_ten_million_character_name_is_shortened_in_the_stall_messages():
    """Before, the stall warning of such a name hung the job."""
    env = {"BLINKFLOW_STALL_CHECK_TIME_SECONDS": "1", "BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS": "4"}
    proc = run_blinkrun(["-np", "3", PY, CASES, "long_name"], timeout=120, env=env)
    stalled = re.findall(r"STALLED rank (\d) chars=(\d+): (.*)$", proc.stdout, re.M)
    assert sorted(int(r) for r, _, _ in stalled) == [0, 1, 2], proc.stdout[-3000:] + proc.stderr[-3000:]
    for _, chars, text in stalled:  # whichever name outlasted the shutdown time first, shortened
        assert int(chars) < 3000 and "stall: tensors not submitted by every rank" in text, text
    assert "(10000002 characters): missing on ranks [1, 2]" in proc.stderr, proc.stderr[-3000:]
    assert max(len(line) for line in proc.stderr.splitlines()) < 5000
