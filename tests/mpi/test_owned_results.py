"""Results are owned: dropped handles release theirs, completed calls outlive shutdown(), held
results survive the pool's reuse, and only handles are handles (owned_results_script.py)."""
import os

import pytest

from harness import case_names, launch

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "owned_results_script.py")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("case", case_names(CASES))
def test_results_are_owned(n, case):
    launch(n, CASES, timeout=300).expect(case)
