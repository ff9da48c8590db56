"""GPU tier (STYLE habit 12): skipped where no CUDA device (or CuPy) is found, and run for real
wherever one is. Set BLINKFLOW_EXPECT_GPU=1 on a GPU runner to turn a silent skip (CuPy not
installed, driver not visible) into a failure."""
import os

import pytest


def gpu_count() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


HAVE_GPU = gpu_count() > 0


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(autouse=True)
def _needs_gpu():
    if HAVE_GPU:
        return
    if os.environ.get("BLINKFLOW_EXPECT_GPU") == "1":
        pytest.fail("BLINKFLOW_EXPECT_GPU=1 but CuPy sees no CUDA device (pip install cupy-cuda12x?)")
    pytest.skip("needs a CUDA GPU and CuPy (pip install cupy-cuda12x)")
