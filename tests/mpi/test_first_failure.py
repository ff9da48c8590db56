"""Issue 18, finding 8: the first failure is named correctly (see first_failure_cases.py)."""
import os
import re

import pytest

from blinkrun_helpers import PY, run_blinkrun
from mpi_launch import run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "first_failure_cases.py")


@pytest.mark.mpi
@pytest.mark.parametrize("attempt", [1, 2])
def test_under_recovery_the_killed_rank_is_named_not_a_survivor(attempt):
    """Before, a survivor that noticed the dead rank and exited was blamed in 5 of 7 runs."""
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
    proc = run_mpi(3, ["python", CASES, "uncaught"], timeout=120, check=False)
    caught = re.findall(r"^CAUGHT rank (\d) rank=(\S+): (.*)$", proc.stdout, re.M)
    assert sorted(int(r) for r, _, _ in caught) == [0, 1], proc.stdout + proc.stderr[-3000:]
    for _, blamed, text in caught:
        assert blamed == "2" and "shutdown() was called" not in text, text
        assert "rank 2: its process is exiting after an uncaught ValueError: rank 2 fails on purpose" in text, text
        assert "init() again" not in text, text
