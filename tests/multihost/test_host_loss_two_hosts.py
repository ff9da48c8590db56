"""An elastic job on 2 + 2 ranks loses its second host in the middle of ``model.fit``: ``bfb``'s
network goes, then every process on it (its Open MPI daemon ``prted`` and its ranks' wrappers
included), as when a machine is powered off. The ranks on ``bfa`` notice (ULFM's heartbeat
detector), re-form, and finish training with equal weights and a falling loss; blinkrun names
the lost ranks, stops the mpirun that would wait for ``bfb`` forever, and exits 0 with nothing
left running on ``bfa``."""
import re

import pytest

import host_loss_job

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.tf, pytest.mark.slow]


def test_a_host_that_goes_away_mid_fit_leaves_the_other_hosts_ranks_training(cluster, tmp_path):
    acted = []

    def take_away(c):
        c.take_away("bfb")
        acted.append(True)

    try:
        out = host_loss_job.run(cluster, tmp_path, take_away)
    finally:
        if acted:
            cluster.bring_back("bfb")
    proc = out.proc
    context = host_loss_job.context(proc)
    assert out.acted_at is not None, "rank 2 never reached the batch at which bfb goes away\n" + context
    assert host_loss_job.survivors(proc) == [0, 1], context  # one reset, the last epoch, equal weights
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
        assert f"blinkrun: rank {rank} (host bfb) lost: no heartbeat from it reached the other ranks" in proc.stderr, context
    assert "ranks 2, 3 left; 4 -> 2 ranks" in proc.stderr, context
    assert proc.returncode == 0, context
    assert out.left_on_bfa == [], f"still running on bfa after blinkrun returned: {out.left_on_bfa}"
    # detection (two ranks, each about blinkrun's 15 s heartbeat timeout), the reset, four epochs and blinkrun's stop of mpirun
    assert out.ended - out.acted_at < 120, out.ended - out.acted_at
