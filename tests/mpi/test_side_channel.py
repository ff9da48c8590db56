"""The side channel frees its communicator on close with receives posted, after a revocation
(as an elastic reset leaves it) and after messages arrived, never waiting for a peer
(side_channel_script.py, one mpirun launch per size, plain and under ULFM as elastic jobs run)."""
import os

import pytest

from harness import case_names, launch

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "side_channel_script.py")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("ulfm", [False, True], ids=["plain", "ulfm"])
@pytest.mark.parametrize("case", case_names(CASES))
def test_side_channel_closes(case, ulfm, n):
    if ulfm:
        launch(n, CASES, timeout=120, env={"ULFM": "1"}, mpi_options=("--with-ft", "ulfm")).expect(case)
    else:
        launch(n, CASES, timeout=120).expect(case)
