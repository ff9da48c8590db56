"""A rank lost while the job re-forms (reform_loss_script.py, 5 ranks under ULFM): a rank the
shrink kept that dies before the new job started on it makes the others agree that the start
failed, shrink again and go on with the right ranks and sums, instead of failing with the step
that broke (a survivor's first collective on the new communicator raised MPI_ERR_PROC_FAILED);
a start that fails without a rank lost ends the reset on every rank after one more shrink."""
import functools
import os
import re

import pytest

from harness import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "reform_loss_script.py")
pytestmark = [pytest.mark.mpi, pytest.mark.xdist_group("elastic_losses_while_reforming")]


@functools.lru_cache(maxsize=None)
def _job():
    return run_ranks(5, ["python", SCRIPT], env={"BLINKFLOW_ELASTIC_MIN_NP": "2"}, timeout=240, check=False,
                     mpi_options=["--with-ft", "ulfm"])


def _context() -> str:
    return _job().said + _job().stdout[-3000:] + _job().stderr[-5000:]


def _resets():
    return [(int(first), int(new), lost, int(size)) for first, new, lost, size in
            re.findall(r"^RESET rank (\d+) new (\d+) lost (\[.*?\]) size (\d+)$", _job().said, re.M)]


def _sums(first: int):
    """What the survivor that was rank ``first`` summed after each reset, in order."""
    return [int(got) for got in re.findall(rf"^SUM rank {first} got (\d+)$", _job().said, re.M)]


def test_a_rank_lost_before_the_new_job_started_on_it_is_shrunk_away_too():
    assert sorted(_resets()) == [(0, 0, "[3, 4]", 3), (1, 1, "[3, 4]", 3), (2, 2, "[3, 4]", 3)], _context()
    assert (_sums(0), _sums(1), _sums(2)) == ([3], [3], [3]), _context()  # 0 + 1 + 2 on the new job
    assert sorted(re.findall(r"^DONE rank (\d+)$", _job().said, re.M)) == ["0", "1", "2"], _context()


def test_a_start_that_fails_without_a_rank_lost_ends_the_reset_on_every_rank():
    ended = dict(re.findall(r"^ENDED rank (\d+) (.*)$", _job().said, re.M))
    assert sorted(ended) == ["0", "1", "2"], _context()
    assert ended["2"] == "RuntimeError: a start that fails on this rank alone", ended
    for rank in ("0", "1"):
        assert ended[rank].startswith("ShutdownError: blinkflow elastic: the job could not start again"), ended
