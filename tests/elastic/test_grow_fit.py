"""A discovery script that offers a slot mid-``model.fit`` (grow_fit_script.py, Horovod's elastic
Keras recipe, started on 2 ranks by ``blinkrun --host-discovery-script``): the new rank joins at
the next ``check_host_updates()``, receives the state (its own initial weights are replaced by the
job's, equal on every rank), the epoch and batch counters go on from where the job was, and the
three ranks finish with bitwise equal weights, each having made one optimizer step per batch of
the job."""
import functools
import os
import re
import stat

import pytest

from blinkrun_helpers import run_blinkrun

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "grow_fit_script.py")
EPOCHS, STEPS, GROW_EPOCH, GROW_BATCH = 4, 4, 1, 2   # grow_fit_script.py's
pytestmark = [pytest.mark.mpi, pytest.mark.tf, pytest.mark.slow, pytest.mark.xdist_group("elastic_grow_fit")]


@functools.lru_cache(maxsize=None)
def _job(tmp: str):
    pytest.importorskip("tensorflow")
    slots = os.path.join(tmp, "slots")
    with open(slots, "w") as f:
        f.write("localhost:2\n")
    discover = os.path.join(tmp, "discover.sh")
    with open(discover, "w") as f:
        f.write(f"#!/bin/sh\ncat {slots}\n")
    os.chmod(discover, os.stat(discover).st_mode | stat.S_IEXEC)
    return run_blinkrun(["-np", "2", "--host-discovery-script", discover, "python", SCRIPT, slots], timeout=600)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return _job(str(tmp_path_factory.mktemp("grow_fit")))


def _context(job):
    return f"--- stdout ---\n{job.stdout[-4000:]}\n--- stderr ---\n{job.stderr[-3000:]}"


def _rows(job, tag, pattern):
    return [m.groups() for m in re.finditer(rf"^\[\d+\]<stdout>: {tag} {pattern}$", job.stdout, re.M)]


def test_the_new_rank_joins_and_receives_the_state(job):
    assert job.returncode == 0, _context(job)
    trains = _rows(job, "TRAIN", r"rank (\d+) size (\d+) epoch (\d+) batch (\d+) weights (\w+)")
    starts = [(int(r), int(s), int(e), int(b), w) for r, s, e, b, w in trains]
    # Started on 2 ranks; again on 3 after the gain; and once more on 3 when the epoch the gain
    # interrupted had run the batches it had left (its own fit), for the epochs after it.
    assert sorted(t[:2] for t in starts) == [(0, 2), (0, 3), (0, 3), (1, 2), (1, 3), (1, 3), (2, 3), (2, 3)], \
        _context(job)
    after = {}
    for rank, size, epoch, batch, weights in starts:
        if size == 3:
            after.setdefault((epoch, batch), set()).add((rank, weights))
    # The counters of the last commit, made after GROW_BATCH batches of epoch GROW_EPOCH, then the
    # next epoch from its first batch; the same weights on every rank each time.
    assert sorted(after) == [(GROW_EPOCH, GROW_BATCH), (GROW_EPOCH + 1, 0)], after
    for ranks in after.values():
        assert sorted(r for r, _ in ranks) == [0, 1, 2] and len({w for _, w in ranks}) == 1, after
    weights = next(iter(after[(GROW_EPOCH, GROW_BATCH)]))[1]
    own = _rows(job, "BEFORE", r"rank (\d+) weights (\w+)")
    assert [r for r, _ in own] == ["2"] and own[0][1] != weights, own   # its own weights were replaced


def test_three_ranks_finish_with_equal_weights_and_one_step_per_batch(job):
    finals = _rows(job, "FINAL", r"rank (\d+) size (\d+) resets (\d+) epoch (\d+) iterations (\d+) weights (\w+)")
    assert sorted(f[:2] for f in finals) == [("0", "3"), ("1", "3"), ("2", "3")], _context(job)
    assert {f[3] for f in finals} == {str(EPOCHS)} and len({f[5] for f in finals}) == 1, finals
    # One optimizer step per batch of the job on every rank, the new one's counted from the state it
    # received: the GROW_BATCH batches committed before the gain are not trained again after it.
    assert {f[4] for f in finals} == {str(EPOCHS * STEPS)}, finals
    reset_line = re.findall(r"blinkflow elastic reset: 1 rank joined; 2 -> 3 ranks; all-reduce plan .* GB/s \(was .*\)",
                            job.stderr)
    assert len(reset_line) == 1, _context(job)
