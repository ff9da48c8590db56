"""An elastic job on 2 + 2 ranks loses its second host in the middle of ``model.fit``: ``bfb``'s
network goes, then every process on it (its Open MPI daemon ``prted`` and its ranks' wrappers
included), as when a machine is powered off. The ranks on ``bfa`` notice (ULFM's heartbeat
detector), re-form, and finish training with equal weights and a falling loss; blinkrun names
the lost ranks, stops the mpirun that would wait for ``bfb`` forever, and exits 0 with nothing
left running on ``bfa``."""
import os
import re
import sys
import threading
import time

import pytest

from blinkrun_helpers import blinkrun_argv

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.tf, pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "host_loss_script.py")
RUN_TIMEOUT_S = 600   # four TensorFlow ranks start slowly on a shared two-core machine


def take_away_when_told(cluster, marker, done, took):
    while not done.is_set():
        if os.path.exists(marker):
            cluster.take_away("bfb")
            took.append(time.monotonic())
            return
        time.sleep(0.1)


def test_a_host_that_goes_away_mid_fit_leaves_the_other_hosts_ranks_training(cluster, tmp_path):
    marker = str(tmp_path / "host-goes-away")
    done, took = threading.Event(), []
    watcher = threading.Thread(target=take_away_when_told, args=(cluster, marker, done, took), daemon=True)
    watcher.start()
    try:
        proc = cluster.run_on("bfa", blinkrun_argv() + ["-np", "4", "-H", "bfa:2,bfb:2", "--min-np", "2",
                                                        sys.executable, SCRIPT, marker],
                              env=cluster.env(), timeout=RUN_TIMEOUT_S)
        ended = time.monotonic()
    finally:
        done.set()
        watcher.join()
        left_on_bfa = cluster.processes("bfa")
        if took:
            cluster.bring_back("bfb")
    context = proc.stdout[-4000:] + proc.stderr[-6000:]
    assert took, "rank 2 never reached the batch at which bfb goes away\n" + context
    final = re.findall(r"^\[\d+\]<stdout>: FINAL rank (\d+) resets (\d+) epoch (\d+) weights (\w+)$",
                       proc.stdout, re.M)
    assert sorted(int(r) for r, *_ in final) == [0, 1], context
    assert {(resets, epoch) for _, resets, epoch, _ in final} == {("1", "6")}, final
    assert len({digest for *_, digest in final}) == 1, final  # bitwise identical on both survivors
    losses = {}
    for rank, epoch, size, loss in re.findall(r"^\[\d+\]<stdout>: EPOCHLOSS rank (\d+) epoch (\d+) size (\d+) "
                                              r"loss (\S+)$", proc.stdout, re.M):
        losses.setdefault(int(rank), []).append((int(epoch), int(size), float(loss)))
    for rank in (0, 1):
        assert [e for e, _, _ in losses[rank]] == list(range(7)), losses[rank]
        assert [s for _, s, _ in losses[rank]] == [4, 4, 4, 2, 2, 2, 2], losses[rank]
        values = [v for _, _, v in losses[rank]]
        assert all(later < earlier for earlier, later in zip(values, values[1:])), values
    for rank in (2, 3):
        assert f"blinkrun: rank {rank} (host bfb) lost: the other ranks lost contact with it" in proc.stderr, context
    assert "ranks 2, 3 left; 4 -> 2 ranks" in proc.stderr, context
    assert proc.returncode == 0, context
    assert left_on_bfa == [], f"still running on bfa after blinkrun returned: {left_on_bfa}"
    # detection (4 s heartbeat timeout), the reset, four epochs and blinkrun's stop of mpirun
    assert ended - took[0] < 120, ended - took[0]
