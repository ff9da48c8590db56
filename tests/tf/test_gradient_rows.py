"""Horovod's TensorFlow semantics (gradient_rows_cases.py) at 2 and 3 ranks, one launch per size;
a stalled collective ends its case within the job's stall shutdown time."""
import os

import pytest

from harness import case_names, launch

pytest.importorskip("tensorflow")
CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gradient_rows_cases.py")
ENV = {"BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS": "30"}


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("case", case_names(CASES))
def test_horovod_tensorflow_rows(case, n):
    launch(n, CASES, env=ENV, timeout=600).expect(case)
