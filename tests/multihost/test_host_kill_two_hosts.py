"""What Open MPI 5 does not survive: a host's Open MPI daemon (``prted``) that dies while its ranks
and network live (killed, OOM-killed, its ssh session ended). mpirun's runtime (PRRTE 3.0.x) ends
the whole job on a lost daemon, whatever its options (see docs/elastic.md, "Losing a whole host").
This test pins that down: the job ends within seconds with PRRTE's message; blinkrun names the
host whose daemon mpirun lost and the ranks that ran there (they can report nothing themselves),
exits non-zero, and nothing of the job is left running on either host. It fails, and should then
be turned around, once the ranks on ``bfa`` go on."""
import re
import time

import pytest

import host_loss_job

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.tf, pytest.mark.slow]

PRRTE_ENDS_THE_JOB = ("PRTE has lost communication with a remote daemon",
                      "A daemon failed to report back after being spawned")
BFB_EMPTY_S = 10   # the ranks there follow their daemon (their wrappers' parent-death signal)


def test_a_killed_daemon_ends_the_job_naming_its_host_and_leaves_nothing_running(cluster, tmp_path):
    killed = []
    out = host_loss_job.run(cluster, tmp_path, lambda c: killed.extend(c.kill_daemon("bfb")))
    proc = out.proc
    context = host_loss_job.context(proc)
    assert out.acted_at is not None, "rank 2 never reached the batch at which bfb's daemon is killed\n" + context
    assert killed, "no prted ran on bfb"
    assert any(message in proc.stdout + proc.stderr for message in PRRTE_ENDS_THE_JOB), context
    assert not re.search(r"FINAL rank", proc.stdout), context
    assert proc.returncode != 0, context
    assert re.search(r"blinkrun: mpirun exited with status \d+ after it lost its Open MPI daemon on host bfb "
                     r"\(running ranks 2, 3\)", proc.stderr), context
    assert "no rank reported a failure\n" not in proc.stderr, context
    assert out.ended - out.acted_at < 30, out.ended - out.acted_at
    assert out.left_on_bfa == [], f"still running on bfa after blinkrun returned: {out.left_on_bfa}"
    began = time.monotonic()
    while cluster.processes("bfb") and time.monotonic() - began < BFB_EMPTY_S:
        time.sleep(0.2)
    assert cluster.processes("bfb") == [], [open(f"/proc/{p}/cmdline").read() for p in cluster.processes("bfb")]
