"""The CPU executor at 1, 2, 3 and 4 ranks, and as several hosts on one machine (split_hosts):
results within float rounding of a float64 reference, exact for integers, bitwise identical on
every rank. One mpirun launch per configuration runs every case of cpu_backend_script.py (several
hundred calls each); pytest shows each case as a test of its own."""
import os

import pytest

from harness import case_names, launch

CASES = os.path.join(os.path.dirname(__file__), "cpu_backend_script.py")
ALL = case_names(CASES)
#: With 4 KiB chunks a 300007-element all-reduce, or the 61 MiB the window-growth case reduces,
#: is thousands of pipeline steps (two thirds of such a launch's CPU): the default chunk
#: configurations run those cases. Neither tests the chunking; every other case does.
SMALL_CHUNKS = [case for case in ALL if case not in ("allreduce_large", "growth")]


CONFIGS = [
    (1, 0, 0, "auto"), (2, 0, 0, "auto"), (4, 0, 0, "auto"),
    (3, 0, 4096, "auto"),  # many pipeline chunks per shard
    (3, 0, 4096, "mpi"),  # the same, control messages over MPI (CPUs without total store order)
    (4, 2, 0, "auto"),  # two hosts of two ranks: the three-phase path
    (3, 3, 0, "auto"),  # one rank per host: phase 2 only
    (3, 2, 0, "auto"),  # hosts of 2 and 1 ranks: cross groups cut at both hosts' shard boundaries
]


def _cases(chunk_bytes):
    return SMALL_CHUNKS if chunk_bytes else ALL


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,split_hosts,chunk_bytes,control,case", [
    (*config, case) for config in CONFIGS for case in _cases(config[2])])
def test_cpu_backend_collectives(nprocs, split_hosts, chunk_bytes, control, case):
    env = {"BLINKFLOW_SPLIT_HOSTS": str(split_hosts)} if split_hosts else {}
    env["BLINKFLOW_CPU_CONTROL"] = control
    if chunk_bytes:
        env["BLINKFLOW_CHUNK_BYTES"] = str(chunk_bytes)
    launch(nprocs, CASES, env=env, cases=_cases(chunk_bytes), timeout=300).expect(case)
