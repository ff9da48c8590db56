"""Horovod's elastic Keras recipe (fit_script.py, 3 ranks under ULFM): a rank SIGKILLed in the
middle of ``model.fit``; training goes on on the survivors, whose final weights are bitwise
identical and whose loss keeps falling, and which train each batch of the job once: the epoch the
loss interrupted goes on with the batches it had left."""
import os
import re

import pytest

from harness import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "fit_script.py")
EPOCHS, STEPS = 6, 4   # fit_script.py's


@pytest.mark.mpi
@pytest.mark.tf
def test_a_rank_killed_mid_fit_leaves_the_survivors_training_to_equal_weights():
    proc = run_ranks(3, ["python", SCRIPT], timeout=300, check=False, mpi_options=["--with-ft", "ulfm"])
    context = proc.stdout[-4000:] + proc.stderr[-4000:]
    final = re.findall(r"^FINAL rank (\d+) resets (\d+) epoch (\d+) weights (\w+)$", proc.stdout, re.M)
    assert sorted(int(r) for r, *_ in final) == [0, 1], context
    assert {(resets, epoch) for _, resets, epoch, _ in final} == {("1", "6")}, final
    assert len({digest for *_, digest in final}) == 1, final  # bitwise identical on every survivor
    assert proc.returncode == 0, context
    iterations = re.findall(r"^ITERATIONS rank (\d+) (\d+)$", proc.stdout, re.M)
    # Every survivor made one optimizer step per batch of the job: the two batches of epoch 2 that
    # were committed before the loss are not trained again after it.
    assert sorted(iterations) == [("0", str(EPOCHS * STEPS)), ("1", str(EPOCHS * STEPS))], iterations
    losses = {}
    for rank, epoch, size, loss in re.findall(r"^EPOCHLOSS rank (\d+) epoch (\d+) size (\d+) loss (\S+)$",
                                              proc.stdout, re.M):
        losses.setdefault(int(rank), []).append((int(epoch), int(size), float(loss)))
    for rank in (0, 1):
        epochs = [e for e, _, _ in losses[rank]]
        assert epochs == list(range(7)), losses[rank]  # each epoch once: the reset resumed, it did not repeat
        assert [s for _, s, _ in losses[rank]] == [3, 3, 3, 2, 2, 2, 2], losses[rank]
        values = [v for _, _, v in losses[rank]]
        assert all(later < earlier for earlier, later in zip(values, values[1:])), values
