"""Multi-process tests: model.fit on shards with different numbers of batches (see uneven_fit_script.py)."""
import os

import pytest

from mpi_launch import run_mpi

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.tf
@pytest.mark.parametrize("n", [2, 3])
def test_fit_with_uneven_shards(n):
    out = run_mpi(n, ["python", os.path.join(HERE, "uneven_fit_script.py")], timeout=500).stdout
    assert out.count("UNEVEN OK") == n, out[-3000:]
