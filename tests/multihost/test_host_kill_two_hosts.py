"""What Open MPI 5 does not survive: a host whose processes all die while its network stays up
(its daemon ``prted`` among them). The kernel closes the daemon's connections, and mpirun's
runtime (PRRTE 3.0.x) ends the whole job on a lost daemon, whatever its options (see
docs/elastic.md, "Losing a whole host"). This test pins that down: the job ends within seconds,
with PRRTE's message, blinkrun's non-zero status and nothing left running; it fails, and should
then be turned around, once the ranks on ``bfa`` go on."""
import os
import re
import sys
import threading
import time

import pytest

from blinkrun_helpers import blinkrun_argv

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.tf, pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "host_loss_script.py")
RUN_TIMEOUT_S = 600
PRRTE_ENDS_THE_JOB = ("PRTE has lost communication with a remote daemon",
                      "A daemon failed to report back after being spawned")


def kill_when_told(cluster, marker, done, killed):
    while not done.is_set():
        if os.path.exists(marker):
            cluster.kill_processes("bfb")
            killed.append(time.monotonic())
            return
        time.sleep(0.1)


def test_killing_every_process_of_a_host_still_ends_the_job(cluster, tmp_path):
    marker = str(tmp_path / "host-goes-away")
    done, killed = threading.Event(), []
    watcher = threading.Thread(target=kill_when_told, args=(cluster, marker, done, killed), daemon=True)
    watcher.start()
    try:
        proc = cluster.run_on("bfa", blinkrun_argv() + ["-np", "4", "-H", "bfa:2,bfb:2", "--min-np", "2",
                                                        sys.executable, SCRIPT, marker],
                              env=cluster.env(), timeout=RUN_TIMEOUT_S)
        ended = time.monotonic()
    finally:
        done.set()
        watcher.join()
        left_on_bfa = cluster.processes("bfa")
    context = proc.stdout[-3000:] + proc.stderr[-5000:]
    assert killed, "rank 2 never reached the batch at which bfb's processes are killed\n" + context
    assert any(message in proc.stdout + proc.stderr for message in PRRTE_ENDS_THE_JOB), context
    assert not re.search(r"FINAL rank", proc.stdout), context
    assert proc.returncode != 0, context
    assert ended - killed[0] < 30, ended - killed[0]
    assert left_on_bfa == [], f"still running on bfa after blinkrun returned: {left_on_bfa}"
