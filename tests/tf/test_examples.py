"""The Keras example trains to > 90% on digits at 2 ranks, with a progress bar on rank 0 only
(the run test_epoch_start.py reads too: demo_run.py)."""
import os
import re

import pytest

import demo_run

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.xdist_group("tf-demo")
def test_keras_mnist_two_ranks():
    out, checkpoints = demo_run.demo()
    accuracy = float(re.search(r"Test accuracy: ([0-9.]+)", out).group(1))
    assert accuracy > 0.90, out[-2000:]
    assert out.count("Epoch 1/4") == 1, "the progress bar must come from rank 0 only"
    assert out.count("Test accuracy") == 1
    assert sorted(os.listdir(checkpoints)) == [f"checkpoint-{e}.keras" for e in range(1, demo_run.EPOCHS + 1)]
