"""PyTorch data-parallel training through blinkflow on the GPU, 1, 2 and 4 ranks sharing this
machine's GPU(s) (tests/gpu/torch_script.py, one launch per world size, each case a test). Skipped where torch or its CUDA is missing: CI does
not install torch (PyPI's wheel pulls gigabytes of CUDA libraries)."""
import os

import pytest

from harness import case_names, launch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_script.py")


@pytest.fixture(scope="module", autouse=True)
def _torch_on_cuda():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        if os.environ.get("BLINKFLOW_EXPECT_GPU") == "1":
            pytest.fail(f"BLINKFLOW_EXPECT_GPU=1 but torch {torch.__version__} sees no CUDA device")
        pytest.skip(f"torch {torch.__version__} sees no CUDA device")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("case", case_names(WORKER))
def test_torch_data_parallel_training(n, case):
    job = launch(n, WORKER, env={"BLINKFLOW_TOPOLOGY": "hgx-h100"}, timeout=300)
    job.expect(case)
    if case == "the_held_out_loss_falls":
        print(next(line for line in job.stdout.splitlines() if "held-out loss" in line))
