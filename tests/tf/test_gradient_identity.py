"""Multi-process tests: a gradient is identified by its variable whatever differs between the
ranks' steps (see gradient_identity_script.py)."""
import os

import pytest

from mpi_launch import run_mpi

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.tf
@pytest.mark.parametrize("n, bucket_bytes", [(2, "0"), (3, "1")])
def test_gradients_are_matched_by_variable(n, bucket_bytes):
    out = run_mpi(n, ["python", os.path.join(HERE, "gradient_identity_script.py")], timeout=500,
                  env={"BLINKFLOW_BUCKET_BYTES": bucket_bytes}).stdout
    assert out.count("IDENTITY OK") == n, out[-3000:]
