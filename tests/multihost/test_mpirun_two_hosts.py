"""Plain Open MPI across the two namespaces: the cluster itself works before blinkflow is involved."""
import sys

import pytest

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.timeout(90)]

RANK_LINE = ("from mpi4py import MPI; c = MPI.COMM_WORLD; "
             "print('rank', c.rank, c.size, MPI.Get_processor_name(), c.allreduce(c.rank), flush=True)")


def test_mpirun_places_two_ranks_on_each_host(cluster):
    proc = cluster.mpirun(4, [sys.executable, "-c", RANK_LINE])
    assert proc.returncode == 0, proc.stderr
    rows = sorted(line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("rank "))
    # host names come from each namespace's UTS; the allreduce (0+1+2+3) crossed the veth
    assert rows == [[str(r), "4", "bfa" if r < 2 else "bfb", "6"] for r in range(4)]
