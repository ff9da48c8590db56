"""``init()`` names the rank's GPU for the user: with the cuda backend, the calling thread's
current CUDA device becomes the rank's, as Horovod's ``set_device(local_rank)`` recipe does by
hand, for the top-level ``blinkflow.init()`` and ``blinkflow.tensorflow.init()`` alike. Under the
fake CuPy with a GPU per rank and no peer access (tests/mpi/init_device_script.py), an array
left on device 0 fails on every rank but the first."""
import os

import pytest

from mpi_launch import fake_cupy_env, run_mpi

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "init_device_script.py")


def _run(mode, **settings):
    env = fake_cupy_env(FAKE_CUPY_DEVICES="2", FAKE_CUPY_NO_PEER="0-1", BLINKFLOW_TOPOLOGY="cpu-host:2", **settings)
    return run_mpi(2, ["python", SCRIPT, mode], timeout=240, env=env, check=False)


@pytest.mark.mpi
def test_blinkflow_init_makes_the_rank_gpu_current():
    out = _run("blinkflow")
    assert out.stdout.count("INIT DEVICE OK blinkflow") == 2, out.stdout + out.stderr


@pytest.mark.mpi
@pytest.mark.tf
def test_tensorflow_init_makes_the_rank_gpu_current():
    pytest.importorskip("tensorflow")
    out = _run("tensorflow", BLINKFLOW_BACKEND="cuda")
    assert out.stdout.count("INIT DEVICE OK tensorflow") == 2, out.stdout + out.stderr
