"""Multi-process tests of model.fit with DistributedOptimizer and the callbacks (see fit_script.py)."""
import os

import pytest

from harness import assert_done, fake_cupy_env, run_ranks

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_fit_optimizer_callbacks_and_saving(n):
    # At 4 ranks the variants that do not depend on the number of ranks are left to the 2-rank run.
    # At 2 ranks every gradient is a bucket of its own (BLINKFLOW_BUCKET_BYTES=1), at 4 ranks the
    # default puts these small models' gradients in one bucket: both ends of bucketing.
    extra = ["--core"] if n == 4 else []
    env = {} if n == 4 else {"BLINKFLOW_BUCKET_BYTES": "1"}
    assert_done(run_ranks(n, ["python", os.path.join(HERE, "fit_script.py")] + extra, timeout=500, env=env), n)


@pytest.mark.mpi
def test_fit_on_the_device_route():
    """model.fit whose gradients cross by DLPack into the cuda backend (its fake CuPy here)."""
    env = fake_cupy_env(BLINKFLOW_BACKEND="cuda", BLINKFLOW_TOPOLOGY="cpu-host:2",
                         BLINKFLOW_BUCKET_BYTES="1")
    assert_done(run_ranks(2, ["python", os.path.join(HERE, "fit_script.py"), "--core"], timeout=500, env=env), 2)
