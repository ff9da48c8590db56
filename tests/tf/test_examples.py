"""The Keras example trains to > 90% on digits at 2 ranks, with a progress bar on rank 0 only."""
import os
import re

import pytest

from harness import run_ranks

pytest.importorskip("tensorflow")
pytest.importorskip("sklearn")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.mpi
def test_keras_mnist_two_ranks(tmp_path):
    script = os.path.join(ROOT, "examples", "keras_mnist.py")
    out = run_ranks(2, ["python", script, "--epochs", "4", "--checkpoint-dir", str(tmp_path)], timeout=400).stdout
    accuracy = float(re.search(r"Test accuracy: ([0-9.]+)", out).group(1))
    assert accuracy > 0.90, out[-2000:]
    assert out.count("Epoch 1/4") == 1, "the progress bar must come from rank 0 only"
    assert out.count("Test accuracy") == 1
    assert sorted(os.listdir(tmp_path)) == [f"checkpoint-{e}.keras" for e in range(1, 5)]
