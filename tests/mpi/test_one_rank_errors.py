"""One rank's error reaches every rank within the stall bound, never a hang (one_rank_errors_cases.py).
Cases that end the job (a stall shutdown) get a launch of their own."""
import os
import re

import pytest

from mpi_launch import run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "one_rank_errors_cases.py")
STALL = {"BLINKFLOW_STALL_CHECK_TIME_SECONDS": "1", "BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS": "4"}


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("cases", [["a_name_submitted_twice_on_one_rank"], ["join_while_a_peer_waits_in_a_process_set"],
                                   ["remove_process_set_on_one_rank"], ["a_rank_that_leaves_its_loop_early"]],
                         ids=["duplicate", "join", "remove", "early"])
def test_one_rank_errors_reach_every_rank(n, cases):
    if n < 3 and cases == ["join_while_a_peer_waits_in_a_process_set"]:
        pytest.skip("a two-rank process set other than the global set needs 3 ranks")
    out = run_mpi(n, ["python", CASES] + cases, timeout=120, env=STALL).stdout
    for case in cases:
        ranks = sorted(int(r) for r in re.findall(rf"^OK {case} rank (\d+)$", out, re.M))
        assert ranks == list(range(n)), f"case {case} did not pass on every rank:\n{out[-3000:]}"
