"""CudaBackend with 2 and 4 ranks sharing the GPU(s) of this machine, through mpirun.

Results must equal the numpy reference and be bitwise identical on every rank (the worker
checks both and reports every mismatch). HOSTS > 1 pretends the ranks live on several machines,
so transfers between them go over MPI and the planned all-reduce runs its three phases
(intra-host trees, cross-host all-reduce, intra-host broadcast) on one box.
"""
import os

import pytest

from mpi_launch import run_mpi

WORKER = os.path.join(os.path.dirname(__file__), "cuda_backend_worker.py")


@pytest.mark.mpi
@pytest.mark.parametrize("n,hosts", [(2, 1), (4, 1), (4, 2)])
def test_backend_chain_schedules(n, hosts):
    out = run_mpi(n, ["python", "-m", "mpi4py", WORKER, "chain", str(hosts)], timeout=300)
    assert f"OK {n} ranks" in out.stdout, out.stdout + out.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("n,hosts", [(2, 1), (4, 1), (4, 2), (3, 3)])
def test_backend_planned_trees(n, hosts):
    out = run_mpi(n, ["python", "-m", "mpi4py", WORKER, "plan", str(hosts)], timeout=300)
    assert f"OK {n} ranks" in out.stdout, out.stdout + out.stderr
