"""CudaBackend with 2 and 4 ranks sharing the GPU(s) of this machine, through mpirun.

Results must equal the numpy reference and be bitwise identical on every rank (the worker
checks both and reports every mismatch). HOSTS=2 pretends the ranks live on two machines, so
the three-phase path (intra-host trees, cross-host shard all-reduce, intra-host all-gather)
runs on one box.
"""
import importlib
import importlib.util
import os

import pytest

from mpi_launch import run_mpi

WORKER = os.path.join(os.path.dirname(__file__), "cuda_backend_worker.py")


def _planner_ready() -> bool:
    try:
        return (importlib.util.find_spec("blinkflow.schedule.lower") is not None
                and hasattr(importlib.import_module("blinkflow.planner"), "make_plan"))
    except ImportError:
        return False


@pytest.mark.mpi
@pytest.mark.parametrize("n,hosts,schedule", [(2, 1, "chain"), (4, 1, "chain"), (4, 2, "chain"), (4, 2, "direct")])
def test_backend_chain_schedules(n, hosts, schedule):
    out = run_mpi(n, ["python", "-m", "mpi4py", WORKER, schedule, str(hosts)], timeout=300)
    assert f"OK {n} ranks" in out.stdout, out.stdout + out.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("n,hosts", [(2, 1), (4, 1), (4, 2)])
def test_backend_planned_trees(n, hosts):
    if not _planner_ready():
        pytest.skip("the planner's make_plan / lower have not landed on this branch")
    out = run_mpi(n, ["python", "-m", "mpi4py", WORKER, "plan", str(hosts)], timeout=300)
    assert f"OK {n} ranks" in out.stdout, out.stdout + out.stderr
