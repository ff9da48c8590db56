"""A new rank that never reaches ``init()`` holds the ranks that spawn it inside
``MPI_Comm_spawn``, which MPI cannot take back (grow_newcomer_script.py):

- one whose process ends first: blinkrun sees it end before MPI's start-up and stops the job with
  one line naming it, instead of a hang;
- one that hangs: past ``--elastic-timeout`` (``BLINKFLOW_ELASTIC_JOIN_TIMEOUT_SECONDS``) every
  rank raises InitError naming the new rank's slot and host, and the job ends, the hung process
  with it.
"""
import os
import re
import stat
import subprocess
import time
import uuid

import pytest

from blinkrun_helpers import run_blinkrun

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grow_newcomer_script.py")
pytestmark = pytest.mark.mpi


def _run(tmp_path, mode, token, *flags):
    slots = tmp_path / "slots"
    slots.write_text("localhost:2\n")
    discover = tmp_path / "discover.sh"
    discover.write_text(f"#!/bin/sh\ncat {slots}\n")
    discover.chmod(discover.stat().st_mode | stat.S_IEXEC)
    return run_blinkrun(["-np", "2", "--host-discovery-script", str(discover), *flags,
                         "python", SCRIPT, mode, str(slots), token], timeout=120)


def test_a_new_rank_that_fails_first_stops_the_job_naming_it(tmp_path):
    done = _run(tmp_path, "fails", "-")
    assert ("blinkrun: new rank 2 (host localhost) exited with status 3 before it began MPI's start-up; the ranks "
            "starting it cannot go on (MPI_Comm_spawn waits for it): stopping the job") in done.stderr, done.stderr[-3000:]
    # The status is the new rank's when its wrapper's event reached blinkrun before its end
    # (mpirun drops a killed process's unsent output), else mpirun's; never 0.
    assert done.returncode in (3, 1), done.stderr[-3000:]


def test_a_new_rank_that_hangs_ends_the_job_with_an_init_error_naming_it_and_leaves_no_process(tmp_path):
    token = f"elastic-newcomer-hangs-{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    done = _run(tmp_path, "hangs", token, "--elastic-timeout", "5")
    took = time.monotonic() - started
    said = re.findall(r"InitError: blinkflow elastic: 1 new rank \(blinkrun slot 2 on localhost\) did not call "
                      r"init\(\) within 5 s \(BLINKFLOW_ELASTIC_JOIN_TIMEOUT_SECONDS, blinkrun --elastic-timeout\)",
                      done.stderr)
    assert said, done.stderr[-3000:]
    assert done.returncode != 0, done.stderr[-3000:]
    assert took < 100, took   # not the hour the new rank sleeps
    left = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert token not in left, [line for line in left.splitlines() if token in line]
