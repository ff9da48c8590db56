"""Ranks lost while the job re-forms (reform_loss_script.py, 5 ranks under ULFM): a rank the
shrink kept that dies before the new job started, or after it started but before the ranks agreed
that it had, makes the others shrink again and go on with the right ranks and sums, instead of
failing with the step that broke."""
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
    return run_ranks(5, ["python", SCRIPT], env={"BLINKFLOW_ELASTIC_MIN_NP": "1"}, timeout=240, check=False,
                     mpi_options=["--with-ft", "ulfm"])


def _context() -> str:
    return _job().stdout[-3000:] + _job().stderr[-5000:]


def _resets():
    return [(int(first), int(new), lost, int(size)) for first, new, lost, size in
            re.findall(r"^RESET rank (\d+) new (\d+) lost (\[.*?\]) size (\d+)$", _job().stdout, re.M)]


def _sums(first: int):
    """What the survivor that was rank ``first`` summed after each reset, in order."""
    return [int(got) for got in re.findall(rf"^SUM rank {first} got (\d+)$", _job().stdout, re.M)]


def test_a_rank_lost_before_the_new_job_started_on_it_is_shrunk_away_too():
    first = [r for r in _resets() if r[3] != 1]
    assert sorted(first) == [(0, 0, "[3, 4]", 3), (1, 1, "[3, 4]", 3), (2, 2, "[3, 4]", 3)], _context()
    assert (_sums(0)[:1], _sums(1), _sums(2)) == ([3], [3], [3]), _context()  # 0 + 1 + 2 on the new job


def test_a_rank_lost_before_the_ranks_agreed_that_the_new_job_started_is_shrunk_away_too():
    assert [r for r in _resets() if r[3] == 1] == [(0, 0, "[1, 2]", 1)], _context()
    assert _sums(0) == [3, 0], _context()
    assert re.findall(r"^DONE rank (\d+)$", _job().stdout, re.M) == ["0"], _context()
