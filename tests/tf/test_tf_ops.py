"""Multi-process tests of the TF collectives, their gradients, DistributedGradientTape,
broadcast_variables and error mapping, eagerly and in tf.function (see ops_script.py): on the
host route (the cpu backend), and on the device route, where TF tensors cross by DLPack into the
cuda backend (its fake CuPy here, BLINKFLOW_BACKEND=cuda) without a host conversion."""
import os

import pytest

from harness import assert_done, fake_cupy_env, run_ranks

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_tf_ops_values_gradients_and_errors(n):
    assert_done(run_ranks(n, ["python", os.path.join(HERE, "ops_script.py")], timeout=400, env={"EXPECT_ROUTE": "host"}), n)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_tf_tensors_reach_the_cuda_backend_by_dlpack(n):
    env = fake_cupy_env(BLINKFLOW_BACKEND="cuda", BLINKFLOW_TOPOLOGY=f"cpu-host:{n}", EXPECT_ROUTE="device")
    assert_done(run_ranks(n, ["python", os.path.join(HERE, "ops_script.py")], timeout=400, env=env), n)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_tf_calls_one_rank_refuses_fail_on_every_rank_and_the_next_pairs(n):
    """Issue 18, findings 1-3 through the TensorFlow API (refusal_script.py)."""
    assert_done(run_ranks(n, ["python", os.path.join(HERE, "refusal_script.py")], timeout=400), n)
