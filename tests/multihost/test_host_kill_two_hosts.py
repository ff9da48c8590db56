"""What Open MPI 5 does not survive: a host whose processes all die while its network stays up
(its daemon ``prted`` among them). The kernel closes the daemon's connections, and mpirun's
runtime (PRRTE 3.0.x) ends the whole job on a lost daemon, whatever its options (see
docs/elastic.md, "Losing a whole host"). This test pins that down: the job ends within seconds,
with PRRTE's message, blinkrun's non-zero status and nothing left running; it fails, and should
then be turned around, once the ranks on ``bfa`` go on."""
import re

import pytest

import host_loss_job

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.tf, pytest.mark.slow]

PRRTE_ENDS_THE_JOB = ("PRTE has lost communication with a remote daemon",
                      "A daemon failed to report back after being spawned")


def test_killing_every_process_of_a_host_still_ends_the_job(cluster, tmp_path):
    out = host_loss_job.run(cluster, tmp_path, lambda c: c.kill_processes("bfb"))
    proc = out.proc
    context = host_loss_job.context(proc)
    assert out.acted_at is not None, "rank 2 never reached the batch at which bfb's processes are killed\n" + context
    assert any(message in proc.stdout + proc.stderr for message in PRRTE_ENDS_THE_JOB), context
    assert not re.search(r"FINAL rank", proc.stdout), context
    assert proc.returncode != 0, context
    assert out.ended - out.acted_at < 30, out.ended - out.acted_at
    assert out.left_on_bfa == [], f"still running on bfa after blinkrun returned: {out.left_on_bfa}"
