"""A rank that never reaches MPI (exits with status 0, or sleeps, before it imports blinkflow)
ends the job within the start timeout with an error naming it: under blinkrun from outside the ranks,
under plain mpirun by the watchdog of a waiting rank (MPI's start-up holds the GIL, so it is a
process), which finds the ranks that never marked the job's folder, or by mpirun itself."""
import os
import re
import subprocess
import sys
import time

import pytest

from blinkrun_helpers import blinkrun_argv
from blinkrun_helpers import test_env as rank_env
from mpi_launch import mpirun_argv

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "never_reaches_mpi_script.py")
START_TIMEOUT = 6


def _run(argv, env):
    began = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=90, env=rank_env(env))
    return proc, time.monotonic() - began


@pytest.mark.mpi
@pytest.mark.parametrize("how", ["exit", "sleep"])
@pytest.mark.parametrize("n", [2, 3])
def test_blinkrun_names_a_rank_that_never_reaches_mpi(n, how):
    proc, took = _run(blinkrun_argv() + ["-np", str(n), "--start-timeout", str(START_TIMEOUT), sys.executable,
                                         SCRIPT, how], {})
    why = {"exit": "exited with status 0 without starting MPI", "sleep": "is still running but has not started MPI"}
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert f"rank 1 (host {os.uname().nodename}) {why[how]}" in proc.stderr, proc.stderr[-3000:]
    # A rank that exits after another began MPI's start-up makes Open MPI's mpirun stop the job at
    # once (one that exits before, or sleeps, leaves blinkrun's start-up check to do it): which
    # comes first depends on how fast each rank starts, and blinkrun names rank 1 either way.
    stopped_by = [f"did not begin it within {START_TIMEOUT} s"]
    if how == "exit":
        stopped_by.append("ended without beginning it, so mpirun stopped the job")
    assert any(said in proc.stderr for said in stopped_by), proc.stderr[-3000:]
    assert "INIT returned" not in proc.stdout and took < START_TIMEOUT + 30, took


@pytest.mark.mpi
@pytest.mark.parametrize("how", ["exit", "sleep"])
@pytest.mark.parametrize("n", [2, 3])
def test_plain_mpirun_ends_a_job_whose_rank_never_reaches_mpi(n, how):
    env = {"BLINKFLOW_START_TIMEOUT": str(START_TIMEOUT), "PYTHONUNBUFFERED": "1"}
    proc, took = _run(mpirun_argv(n, [sys.executable, SCRIPT, how], env), env)
    assert proc.returncode != 0 and "INIT returned" not in proc.stdout
    # The first waiting rank whose deadline passes names the one that never began (each marked
    # itself before MPI_Init) and stops; mpirun then ends the job, often before the deadlines of
    # ranks that reached MPI_Init later pass (on a loaded host, seconds later): so one rank's
    # watchdog speaks at least, and every one that speaks names rank 1.
    said = re.findall(r"blinkflow: rank (\d+): MPI's start-up \(MPI_Init, in blinkflow.init\(\)\) did not complete "
                      r"within 6 s \(BLINKFLOW_START_TIMEOUT\): (.*?) never began it", proc.stderr)
    waiting = {str(rank) for rank in [0] + list(range(2, n))}
    assert all(rank in waiting and who == "rank 1" for rank, who in said), said
    # Rank 1 exiting after another began MPI's start-up makes Open MPI's mpirun stop the job at once,
    # naming rank 1 itself, before any watchdog's deadline.
    mpirun_said = how == "exit" and re.search(r"(prterun|mpirun) has exited due to process rank 1 ", proc.stderr)
    assert said or mpirun_said, proc.stderr[-3000:]
    assert took < START_TIMEOUT + 30, took
