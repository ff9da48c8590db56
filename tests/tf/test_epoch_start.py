"""The demo (examples/keras_mnist.py at 2 ranks) has no epoch-start stall: nothing is torn down on
the path of an epoch's first step on any rank (see epoch_start_script.py). Counted, not timed."""
import os
import re

import pytest

from harness import run_ranks

pytest.importorskip("tensorflow")
pytest.importorskip("sklearn")
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "keras_mnist.py")


@pytest.mark.mpi
def test_no_teardown_on_the_first_step_of_an_epoch(tmp_path):
    epochs = 4
    out = run_ranks(2, ["python", os.path.join(HERE, "epoch_start_script.py"), EXAMPLE, "--epochs", str(epochs),
                      "--checkpoint-dir", str(tmp_path)], timeout=400).stdout
    found = re.findall(r"EPOCH STARTS (\d) teardowns=(\d+) first_steps=(\d+)", out)
    assert sorted(rank for rank, _, _ in found) == ["0", "1"], out[-3000:]
    for rank, teardowns, first_steps in found:
        assert int(first_steps) == epochs - 1, out[-3000:]  # every later epoch's first step was watched
        assert int(teardowns) == 0, f"rank {rank} tore down {teardowns} data iterators at epoch starts"
