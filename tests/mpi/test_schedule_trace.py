"""What runs is the lowered schedule (issue: one executor of the schedule IR): the CPU backend's
transfers equal the schedule's steps, inside a host and across two pretend hosts (three phases),
and the simulator runs the same schedule object (tests/mpi/schedule_trace_script.py)."""
import os

import pytest

from harness import assert_done, run_ranks

CASES = os.path.join(os.path.dirname(__file__), "schedule_trace_script.py")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,split_hosts", [(2, 0), (4, 0), (4, 2), (3, 2)])
def test_transfers_are_the_schedule(nprocs, split_hosts):
    env = {"BLINKFLOW_SPLIT_HOSTS": str(split_hosts)} if split_hosts else {}
    assert_done(run_ranks(nprocs, CASES, env=env, timeout=180), nprocs)
