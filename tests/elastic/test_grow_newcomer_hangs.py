"""A new rank that hangs before ``init()`` holds the ranks that spawn it inside
``MPI_Comm_spawn``, which MPI cannot take back: past ``--elastic-timeout``
(``BLINKFLOW_ELASTIC_JOIN_TIMEOUT_SECONDS``) every rank raises InitError naming the new rank's
slot and host, and the job ends, the hung process with it (grow_newcomer_hangs_script.py)."""
import os
import re
import stat
import subprocess
import time
import uuid

import pytest

from blinkrun_helpers import run_blinkrun

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grow_newcomer_hangs_script.py")
TOKEN = f"elastic-newcomer-hangs-{uuid.uuid4().hex[:12]}"
pytestmark = pytest.mark.mpi


def test_the_job_ends_with_an_init_error_naming_the_new_rank_and_leaves_no_process(tmp_path):
    slots = tmp_path / "slots"
    slots.write_text("localhost:2\n")
    discover = tmp_path / "discover.sh"
    discover.write_text(f"#!/bin/sh\ncat {slots}\n")
    discover.chmod(discover.stat().st_mode | stat.S_IEXEC)
    started = time.monotonic()
    done = run_blinkrun(["-np", "2", "--host-discovery-script", str(discover), "--elastic-timeout", "5",
                         "python", SCRIPT, str(slots), TOKEN], timeout=120)
    took = time.monotonic() - started
    said = re.findall(r"InitError: blinkflow elastic: 1 new rank \(blinkrun slot 2 on localhost\) did not call "
                      r"init\(\) within 5 s \(BLINKFLOW_ELASTIC_JOIN_TIMEOUT_SECONDS, blinkrun --elastic-timeout\)",
                      done.stderr)
    assert said, done.stderr[-3000:]
    assert done.returncode != 0, done.stderr[-3000:]
    assert took < 100, took   # not the hour the new rank sleeps
    left = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert TOKEN not in left, [line for line in left.splitlines() if TOKEN in line]
