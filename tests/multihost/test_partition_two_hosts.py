"""An elastic job on 2 + 2 ranks whose hosts are cut apart in the middle of ``model.fit`` while
every process lives (nftables drops every packet on the veth): a split brain waiting to happen,
since each side sees the other's ranks as lost and either could shrink and train on alone.

One job checks the whole story (docs/elastic.md, "A network partition"):

- ``bfa``'s side (ranks 0 and 1: half of the job, with rank 0) re-forms and finishes with
  bitwise equal weights; blinkrun names ranks 2 and 3 lost with what it saw and exits 0;
- ``bfb``'s side (ranks 2 and 3: half, without rank 0) ends with PartitionError naming ``bfa``
  and trains no further (its lines reach the shared file system, not blinkrun);
- nothing of the job runs on ``bfa`` when blinkrun returns, and on ``bfb`` neither a rank nor
  Open MPI's daemon while the hosts are still apart; once they can reach each other again,
  nothing at all (the ssh session bfa's blinkrun stopped ends when its peer's reset arrives).
"""
import re
import time

import pytest

import host_loss_job

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.tf, pytest.mark.slow]

HEALED_CLEAN_S = 60   # after the cut heals: sshd's next retransmission meets bfa's reset


def _described(cluster, pids):
    names = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read().replace(b"\0", b" ").decode(errors="replace")
            names.append(f"{pid}: {line[:160]}")
        except OSError:
            pass
    return names


def test_a_partition_leaves_one_side_training_and_stops_the_other(cluster, tmp_path):
    logdir = tmp_path / "ranks"
    logdir.mkdir()
    cut = cluster.partitioned()
    entered = []

    def cut_apart(c):
        cut.__enter__()
        entered.append(True)

    try:
        out = host_loss_job.run(cluster, tmp_path, cut_apart, script_args=[str(logdir)])
        left_on_bfb_cut = _described(cluster, cluster.processes("bfb"))
    finally:
        if entered:
            cut.__exit__(None, None, None)
    healed = time.monotonic()
    proc = out.proc
    context = host_loss_job.context(proc)
    assert out.acted_at is not None, "rank 2 never reached the batch at which the hosts are cut apart\n" + context

    # bfa's side goes on and finishes
    final = re.findall(r"^\[\d+\]<stdout>: FINAL rank (\d+) resets (\d+) epoch (\d+) weights (\w+)$",
                       proc.stdout, re.M)
    assert sorted(int(r) for r, *_ in final) == [0, 1], context
    assert {(resets, epoch) for _, resets, epoch, _ in final} == {("1", "6")}, final
    assert len({digest for *_, digest in final}) == 1, final

    # bfb's side stops with the partition named, and does not train on as a second job
    for rank in (2, 3):
        lines = (logdir / f"rank.{rank}").read_text()
        assert re.search(rf"^ERROR rank {rank} PartitionError: .*network partition.*\(host bfa\)", lines, re.M), lines
        assert not re.search(r"^EPOCHLOSS rank \d+ epoch \d+ size 2 ", lines, re.M), lines
        assert "FINAL" not in lines, lines

    # blinkrun says what it saw, and the job's status is the side that went on
    for rank in (2, 3):
        assert re.search(rf"blinkrun: rank {rank} \(host bfb\) lost: no heartbeat", proc.stderr), context
    assert "ranks 2, 3 left; 4 -> 2 ranks" in proc.stderr, context
    assert proc.returncode == 0, context

    # nothing left running
    assert out.left_on_bfa == [], f"still running on bfa after blinkrun returned: {out.left_on_bfa}"
    assert not [p for p in left_on_bfb_cut if "prted" in p or "python" in p], \
        f"still running on bfb, cut off, after blinkrun returned: {left_on_bfb_cut}"
    while cluster.processes("bfb") and time.monotonic() - healed < HEALED_CLEAN_S:
        time.sleep(0.5)
    assert cluster.processes("bfb") == [], _described(cluster, cluster.processes("bfb"))
    # the detection (about the 15 s heartbeat timeout per rank), the reset, four epochs, the stop of mpirun
    assert out.ended - out.acted_at < 150, out.ended - out.acted_at
