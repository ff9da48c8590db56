"""Results are owned: dropped handles release theirs, completed calls outlive shutdown(), held
results survive the pool's reuse, and only handles are handles (owned_results_cases.py)."""
import os

import pytest

from mpi_launch import assert_every_case_passed, run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "owned_results_cases.py")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_results_are_owned(n):
    assert_every_case_passed(CASES, run_mpi(n, ["python", CASES], timeout=300).stdout, n)
