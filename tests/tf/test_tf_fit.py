"""Multi-process tests of model.fit with DistributedOptimizer and the callbacks (see fit_script.py)."""
import os

import pytest

from mpi_launch import run_mpi

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_fit_optimizer_callbacks_and_saving(n):
    out = run_mpi(n, ["python", os.path.join(HERE, "fit_script.py")], timeout=500).stdout
    assert out.count("FIT OK") == n, out[-3000:]
