"""GPU tier: skipped where no GPU is found, and run for real wherever one is.
Set BLINKFLOW_EXPECT_GPU=1 on a GPU runner to turn a skip (CuPy not installed, driver not
visible) into a failure.

Most tests drive the GPU through CuPy. A module that sets ``NEEDS_CUPY = False`` (the nvcc
kernel test) only needs a GPU that ``nvidia-smi`` lists, so kernels can be checked on a GPU
machine where CuPy cannot be installed.
"""
import os

import pytest

from gpu_detect import cupy_gpus, nvidia_smi_gpus


CUPY_GPUS = cupy_gpus()
NVIDIA_GPUS = nvidia_smi_gpus() if CUPY_GPUS == 0 else CUPY_GPUS


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(autouse=True)
def _needs_gpu(request):
    needs_cupy = getattr(request.module, "NEEDS_CUPY", True)
    if (CUPY_GPUS if needs_cupy else NVIDIA_GPUS) > 0:
        return
    what = "CuPy sees no CUDA device (pip install cupy-cuda12x?)" if needs_cupy else "nvidia-smi lists no GPU"
    if os.environ.get("BLINKFLOW_EXPECT_GPU") == "1":
        pytest.fail(f"BLINKFLOW_EXPECT_GPU=1 but {what}")
    pytest.skip(f"needs a CUDA GPU: {what}")
