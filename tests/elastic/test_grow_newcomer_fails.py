"""A new rank whose process ends before ``init()`` leaves the ranks that spawn it waiting inside
``MPI_Comm_spawn`` for good; blinkrun sees it end before MPI's start-up and stops the job with
one line naming it, instead of a hang (grow_newcomer_fails_script.py)."""
import os
import stat

import pytest

from blinkrun_helpers import run_blinkrun

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grow_newcomer_fails_script.py")
pytestmark = pytest.mark.mpi


def test_the_job_stops_naming_the_new_rank(tmp_path):
    slots = tmp_path / "slots"
    slots.write_text("localhost:2\n")
    discover = tmp_path / "discover.sh"
    discover.write_text(f"#!/bin/sh\ncat {slots}\n")
    discover.chmod(discover.stat().st_mode | stat.S_IEXEC)
    done = run_blinkrun(["-np", "2", "--host-discovery-script", str(discover), "python", SCRIPT, str(slots)],
                        timeout=120)
    assert ("blinkrun: new rank 2 (host localhost) exited with status 3 before it began MPI's start-up; the ranks "
            "starting it cannot go on (MPI_Comm_spawn waits for it): stopping the job") in done.stderr, done.stderr[-3000:]
    # The status is the new rank's when its wrapper's event reached blinkrun before its end
    # (mpirun drops a killed process's unsent output), else mpirun's; never 0.
    assert done.returncode in (3, 1), done.stderr[-3000:]
