"""Multi-process tests of gradient buckets (see buckets_script.py): overlap with backprop inside a
tf.function, matching by name in any submission order, no deadlock with one inter-op thread,
errors raised at the wait; on the host route and on the device route (the fake CuPy)."""
import os

import pytest

from harness import assert_done, run_ranks

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(os.path.dirname(HERE), "fake_cupy")
ONE_GRADIENT_PER_BUCKET = {"BLINKFLOW_BUCKET_BYTES": "1"}


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_buckets_overlap_match_by_name_and_never_deadlock(n):
    env = dict(ONE_GRADIENT_PER_BUCKET, EXPECT_ROUTE="host")
    assert_done(run_ranks(n, ["python", os.path.join(HERE, "buckets_script.py")], timeout=400, env=env), n)


@pytest.mark.mpi
def test_buckets_on_the_device_route():
    env = dict(ONE_GRADIENT_PER_BUCKET, EXPECT_ROUTE="device", BLINKFLOW_BACKEND="cuda",
               BLINKFLOW_TOPOLOGY="cpu-host:2",
               PYTHONPATH=os.pathsep.join([FAKE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    assert_done(run_ranks(2, ["python", os.path.join(HERE, "buckets_script.py")], timeout=400, env=env), 2)
