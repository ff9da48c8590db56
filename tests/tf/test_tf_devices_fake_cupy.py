"""TF tensors on one GPU per rank through the cuda backend, under the fake CuPy with a GPU per
rank (tests/tf/devices_tf_script.py): DLPack device ids under Horovod's
``set_visible_devices(gpus[local_rank])``, and a ``tf.function`` crossing TF can keep on the GPU."""
import os

import pytest

from mpi_launch import fake_cupy_env, run_mpi

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))


def _run(n, mode, **settings):
    env = fake_cupy_env(BLINKFLOW_BACKEND="cuda", BLINKFLOW_TOPOLOGY=f"cpu-host:{n}", FAKE_CUPY_DEVICES=str(n),
                        **settings)
    out = run_mpi(n, ["python", os.path.join(HERE, "devices_tf_script.py"), mode], timeout=300, env=env, cwd=HERE)
    assert out.stdout.count(f"TF DEVICES OK {mode}") == n, out.stdout + out.stderr


@pytest.mark.mpi
@pytest.mark.tf
def test_dlpack_ids_follow_the_memory_under_set_visible_devices():
    """TF says GPU 0 for every rank's tensors; rank 1's live on GPU 1 (no peer access to GPU 0)."""
    _run(2, "ids", FAKE_CUPY_TF_SEES_ONE="1", FAKE_CUPY_NO_PEER="0-1")


@pytest.mark.mpi
@pytest.mark.tf
def test_the_crossing_inside_tf_function_stays_on_the_gpu():
    _run(2, "residency")
