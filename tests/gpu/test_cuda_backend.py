"""CudaBackend with 2 and 4 ranks sharing the GPU(s) of this machine, through mpirun.

Results must equal the numpy reference and be bitwise identical on every rank
(cuda_backend_script.py, one launch per configuration, each case a test). HOSTS > 1 pretends the ranks live on several machines,
so transfers between them go over MPI and the planned all-reduce runs its three phases
(intra-host trees, cross-host all-reduce, intra-host broadcast) on one box.
"""
import os

import pytest

from harness import case_names, launch

WORKER = os.path.join(os.path.dirname(__file__), "cuda_backend_script.py")


@pytest.mark.mpi
@pytest.mark.parametrize("n,hosts", [(2, 1), (4, 1), (4, 2)])
@pytest.mark.parametrize("case", case_names(WORKER))
def test_backend_chain_schedules(n, hosts, case):
    launch(n, WORKER, args=["chain", str(hosts), "auto"], timeout=300).expect(case)


@pytest.mark.mpi
@pytest.mark.parametrize("n,hosts", [(2, 1), (4, 1), (4, 2), (3, 3)])
@pytest.mark.parametrize("case", case_names(WORKER))
def test_backend_planned_trees(n, hosts, case):
    launch(n, WORKER, args=["plan", str(hosts), "auto"], timeout=300).expect(case)
