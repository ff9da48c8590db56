"""One rank's error reaches every rank within the stall bound, never a hang (one_rank_errors_script.py).
A stall shutdown ends the runtime, so each case gets a launch of its own."""
import os

import pytest

from harness import case_names, launch

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "one_rank_errors_script.py")
STALL = {"BLINKFLOW_STALL_CHECK_TIME_SECONDS": "1", "BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS": "4"}


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("case", case_names(CASES))
def test_one_rank_errors_reach_every_rank(n, case):
    launch(n, CASES, cases=[case], env=STALL, timeout=120).expect(case)
