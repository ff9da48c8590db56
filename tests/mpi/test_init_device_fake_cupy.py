"""``init()`` names the rank's GPU for the user: with the cuda backend, the calling thread's
current CUDA device becomes the rank's, as Horovod's ``set_device(local_rank)`` recipe does by
hand, for the top-level ``blinkflow.init()`` and ``blinkflow.tensorflow.init()`` alike. Under the
fake CuPy with a GPU per rank and no peer access (tests/mpi/init_device_script.py, one launch per
binding, each case a test), an array left on device 0 fails on every rank but the first."""
import os

import pytest

from harness import case_names, fake_cupy_env, launch

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "init_device_script.py")


def _launch(mode, **settings):
    env = fake_cupy_env(FAKE_CUPY_DEVICES="2", FAKE_CUPY_NO_PEER="0-1", BLINKFLOW_TOPOLOGY="cpu-host:2", **settings)
    return launch(2, SCRIPT, args=[mode], env=env)


@pytest.mark.mpi
@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_blinkflow_init_makes_the_rank_gpu_current(case):
    _launch("blinkflow").expect(case)


@pytest.mark.mpi
@pytest.mark.tf
@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_tensorflow_init_makes_the_rank_gpu_current(case):
    pytest.importorskip("tensorflow")
    _launch("tensorflow", BLINKFLOW_BACKEND="cuda").expect(case)
