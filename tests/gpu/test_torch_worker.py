"""PyTorch data-parallel training through blinkflow on the GPU, 1, 2 and 4 ranks sharing this
machine's GPU(s) (tests/gpu/torch_worker.py). Skipped where torch or its CUDA is missing: CI does
not install torch (PyPI's wheel pulls gigabytes of CUDA libraries)."""
import os

import pytest

from mpi_launch import run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module", autouse=True)
def _torch_on_cuda():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        if os.environ.get("BLINKFLOW_EXPECT_GPU") == "1":
            pytest.fail(f"BLINKFLOW_EXPECT_GPU=1 but torch {torch.__version__} sees no CUDA device")
        pytest.skip(f"torch {torch.__version__} sees no CUDA device")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 4])
def test_torch_data_parallel_training(n):
    out = run_mpi(n, ["python", os.path.join(HERE, "torch_worker.py")], timeout=300,
                  env={"BLINKFLOW_TOPOLOGY": "hgx-h100"})
    assert f"TORCH OK {n} ranks" in out.stdout, out.stdout + out.stderr
    print(out.stdout.strip().splitlines()[-1])
