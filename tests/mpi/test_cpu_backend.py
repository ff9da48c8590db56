"""The CPU executor at 1, 2, 3 and 4 ranks, and as several hosts on one machine (split_hosts):
results within float rounding of a float64 reference, exact for integers, bitwise identical on
every rank. One mpirun launch per configuration runs several hundred cases
(tests/mpi/cpu_backend_cases.py)."""
import os

import pytest

from mpi_launch import run_mpi

CASES = os.path.join(os.path.dirname(__file__), "cpu_backend_cases.py")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,split_hosts,chunk_bytes,control", [
    (1, 0, 0, "auto"), (2, 0, 0, "auto"), (4, 0, 0, "auto"),
    (3, 0, 4096, "auto"),  # many pipeline chunks per shard
    (3, 0, 4096, "mpi"),  # the same, control messages over MPI (CPUs without total store order)
    (4, 2, 0, "auto"),  # two hosts of two ranks: the three-phase path
    (3, 3, 0, "auto"),  # one rank per host: phase 2 only
    (3, 2, 0, "auto"),  # hosts of 2 and 1 ranks: cross groups cut at both hosts' shard boundaries
])
def test_cpu_backend_collectives(nprocs, split_hosts, chunk_bytes, control):
    env = {"BLINKFLOW_SPLIT_HOSTS": str(split_hosts)} if split_hosts else {}
    env["BLINKFLOW_CPU_CONTROL"] = control
    argv = ["python", CASES] + ([str(chunk_bytes)] if chunk_bytes else [])
    out = run_mpi(nprocs, argv, timeout=180, env=env).stdout
    assert "OK" in out.split("CASES")[-1], out[-2000:]
