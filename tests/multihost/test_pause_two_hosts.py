"""An elastic job on 2 + 2 ranks whose ranks on ``bfb`` are paused for 20 s (SIGSTOP, then SIGCONT:
a long GC pause or a swap storm) in the middle of ``model.fit``: longer than the failure
detector's timeout (15 s), so the other ranks cannot tell them from dead ones.

The behaviour docs/elastic.md states ("A paused rank"): a rank paused longer than the detector's
timeout is lost. The detector watches the ranks in a ring and suspects them one after another,
each about the timeout after the last, so of two ranks paused together for 20 s the first is
lost and the second may be heard from again in time: the job goes on with 2 or 3 ranks.
``bfa``'s ranks finish with equal weights; a lost rank, once it runs again, is ended by Open MPI
("I have been reported dead by someone else") and trains no further; blinkrun names each lost
rank with what it saw (no heartbeat), exits 0, and nothing of the job is left on either host.
"""
import re
import time

import pytest

import host_loss_job

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.tf, pytest.mark.slow]

PAUSE_S = 20
BFB_EMPTY_S = 15


def test_ranks_paused_longer_than_the_detector_timeout_are_lost_and_the_rest_go_on(cluster, tmp_path):
    logdir = tmp_path / "ranks"
    logdir.mkdir()
    paused = []
    out = host_loss_job.run(cluster, tmp_path, lambda c: paused.extend(c.pause("bfb", "fit_script.py", PAUSE_S)),
                            script_args=[str(logdir)])
    proc = out.proc
    context = host_loss_job.context(proc)
    assert out.acted_at is not None, "rank 2 never reached the batch at which bfb's ranks are paused\n" + context
    assert len(paused) == 2, paused
    finished = host_loss_job.survivors(proc)
    lost = [r for r in (2, 3) if r not in finished]
    assert finished[:2] == [0, 1] and lost, context
    for rank in lost:
        lines = (logdir / f"rank.{rank}").read_text()
        assert not re.search(r"^EPOCHLOSS rank \d+ epoch \d+ size [23] ", lines, re.M), lines
        assert "FINAL" not in lines, lines
        assert re.search(rf"blinkrun: rank {rank} \(host bfb\) lost: no heartbeat", proc.stderr), context
    assert "its network" not in proc.stderr, context
    assert f"rank{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} left; 4 -> {4 - len(lost)} ranks" \
        in proc.stderr, context
    assert proc.returncode == 0, context
    assert out.left_on_bfa == [], f"still running on bfa after blinkrun returned: {out.left_on_bfa}"
    began = time.monotonic()
    while cluster.processes("bfb") and time.monotonic() - began < BFB_EMPTY_S:
        time.sleep(0.2)
    assert cluster.processes("bfb") == [], cluster.processes("bfb")
