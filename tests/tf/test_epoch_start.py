"""The demo (examples/keras_mnist.py at 2 ranks) has no epoch-start stall: nothing is torn down on
the path of an epoch's first step on any rank (epoch_start_script.py, in the run test_examples.py
reads too: demo_run.py). Counted, not timed."""
import re

import pytest

import demo_run

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.xdist_group("tf-demo")
def test_no_teardown_on_the_first_step_of_an_epoch():
    out, _ = demo_run.demo()
    found = re.findall(r"EPOCH STARTS (\d) teardowns=(\d+) first_steps=(\d+)", out)
    assert sorted(rank for rank, _, _ in found) == ["0", "1"], out[-3000:]
    for rank, teardowns, first_steps in found:
        assert int(first_steps) == demo_run.EPOCHS - 1, out[-3000:]  # every later epoch's first step was watched
        assert int(teardowns) == 0, f"rank {rank} tore down {teardowns} data iterators at epoch starts"
