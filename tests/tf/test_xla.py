"""Multi-process tests of training whose step XLA compiles (see xla_script.py)."""
import os

import pytest

from mpi_launch import run_mpi

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.tf
@pytest.mark.parametrize("n, bucket_bytes", [(2, "0"), (3, "1")])
def test_xla_compiled_training(n, bucket_bytes):
    # One bucket at 2 ranks, a bucket per gradient at 3: a compiled step then holds one
    # submission, or many chained ones.
    out = run_mpi(n, ["python", os.path.join(HERE, "xla_script.py")], timeout=600,
                  env={"BLINKFLOW_BUCKET_BYTES": bucket_bytes}).stdout
    assert out.count("XLA OK") == n, out[-3000:]
