"""A rank that never reaches MPI (exits with status 0, or sleeps, before it imports blinkflow)
ends the job within the start timeout with an error naming it: under blinkrun from outside the ranks,
under plain mpirun by every waiting rank's watchdog (MPI's start-up holds the GIL, so it is a
process), which finds the ranks that never marked the job's folder."""
import os
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
    assert f"did not begin it within {START_TIMEOUT} s" in proc.stderr
    assert "INIT returned" not in proc.stdout and took < START_TIMEOUT + 30, took


@pytest.mark.mpi
@pytest.mark.parametrize("how", ["exit", "sleep"])
@pytest.mark.parametrize("n", [2, 3])
def test_plain_mpirun_ends_a_job_whose_rank_never_reaches_mpi(n, how):
    env = {"BLINKFLOW_START_TIMEOUT": str(START_TIMEOUT), "PYTHONUNBUFFERED": "1"}
    proc, took = _run(mpirun_argv(n, [sys.executable, SCRIPT, how], env), env)
    assert proc.returncode != 0 and "INIT returned" not in proc.stdout
    # Every rank that waits names the one that never began (each marked itself before MPI_Init).
    for rank in [0] + list(range(2, n)):
        assert (f"blinkflow: rank {rank}: MPI's start-up (MPI_Init, in blinkflow.init()) did not complete within 6 s "
                "(BLINKFLOW_START_TIMEOUT): rank 1 never began it") in proc.stderr, proc.stderr[-3000:]
    assert took < START_TIMEOUT + 30, took
