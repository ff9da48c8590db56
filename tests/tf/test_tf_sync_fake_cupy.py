"""The bridge's device synchronisation before TensorFlow sees results, under the fake CuPy whose
work runs deferred (tests/tf/sync_tf_script.py): without it TensorFlow reads memory our streams
have not written yet, and may reuse inputs our kernels still read."""
import os

import pytest

from mpi_launch import fake_cupy_env, run_mpi

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.tf
def test_results_reach_tensorflow_only_after_our_streams_ran():
    env = fake_cupy_env(BLINKFLOW_BACKEND="cuda", BLINKFLOW_TOPOLOGY="cpu-host:2", FAKE_CUPY_DEVICES="2")
    out = run_mpi(2, ["python", os.path.join(HERE, "sync_tf_script.py")], timeout=300, env=env, cwd=HERE,
                  check=False)
    assert out.stdout.count("TF SYNC OK") == 2, out.stdout + out.stderr
