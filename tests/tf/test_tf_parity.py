"""Horovod's TensorFlow API, row by row of issue 17 (parity_script.py): process sets, TF1-style
graphs run by a Session, rank/size ops, build queries, deprecated arguments, Partial*,
IndexedSlices, error classes, scale factors, reduce-scatter, in-place broadcast, local gradients,
gradient aggregation; at 2 and 3 ranks on the host route, and at 2 ranks on the device route
(TF tensors crossing by DLPack into the cuda backend under the fake CuPy, TF1 graphs included)."""
import os

import pytest

from harness import assert_done, fake_cupy_env, run_ranks

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "parity_script.py")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_horovod_tensorflow_api_parity(n):
    assert_done(run_ranks(n, ["python", SCRIPT], timeout=500), n)


@pytest.mark.mpi
def test_horovod_tensorflow_api_parity_on_the_device_route():
    env = fake_cupy_env(BLINKFLOW_BACKEND="cuda", BLINKFLOW_TOPOLOGY="cpu-host:2")
    assert_done(run_ranks(2, ["python", SCRIPT], timeout=500, env=env), 2)
