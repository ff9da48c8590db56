"""Every plan is agreed before it first runs (tests/mpi/plan_agreement_script.py): a rank whose
topology or plan differs makes every rank raise a PlanError naming the ranks, at init for the
all-reduce and at first use for an all-gather or a broadcast from a new root."""
import os

import pytest

from harness import run_ranks

SCRIPT = os.path.join(os.path.dirname(__file__), "plan_agreement_script.py")


@pytest.mark.mpi
@pytest.mark.parametrize("mode,says", [("topology", "different topologies"), ("plan", "different plans for allreduce"),
                                       ("allgather", "different plans for allgather"),
                                       ("broadcast", "different plans for broadcast from device 2")])
def test_one_rank_that_differs_stops_every_rank(mode, says):
    out = run_ranks(3, ["python", SCRIPT, mode], timeout=120, env={"BLINKFLOW_BACKEND": "cpu"}).stdout
    errors = [line for line in out.splitlines() if line.startswith("PLANERROR")]
    assert len(errors) == 3, out[-3000:]
    for line in errors:
        assert says in line and "ranks [0, 2]" in line and "ranks [1]" in line, line
    if mode in ("allgather", "broadcast"):  # failed at first use: that call fails everywhere, the next works
        assert all("PlanError" in line for line in errors), errors
        assert out.count(" True") == 3, out[-3000:]
