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

A second job cuts a fixed-size job apart: the ranks say what they saw (no heartbeat from a rank
on another host), not a guess at why; blinkrun says it heard nothing more from that rank, names
its host, and nothing of the job is left on either host (docs/reliability.md, "Across hosts").
"""
import os
import re
import sys
import threading
import time

import pytest

import host_loss_job
from blinkrun_helpers import blinkrun_argv

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
    cluster.require_partitions()
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
    assert host_loss_job.survivors(proc) == [0, 1], context  # one reset, the last epoch, equal weights

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


STEPS_SCRIPT = """
import os, sys, time
import numpy as np
import blinkflow as bf
bf.init()
for step in range(100000):
    bf.allreduce(np.ones(8), name="step")
    if step == 3 and bf.rank() == 2:
        open(sys.argv[1] + ".tmp", "w").close()
        os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(0.05)
"""
# the stall detector at a few seconds: what it says, not when, is checked here
STALL_ENV = {"BLINKFLOW_STALL_CHECK_TIME_SECONDS": "2", "BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS": "5"}


def test_a_partition_of_a_fixed_size_job_is_said_as_seen_and_leaves_nothing_running(cluster, tmp_path):
    cluster.require_partitions()
    marker = str(tmp_path / "cut-here")
    cut = cluster.partitioned()
    entered, done = [], threading.Event()

    def cut_when_told():
        while not done.is_set():
            if os.path.exists(marker):
                cut.__enter__()
                entered.append(time.monotonic())
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=cut_when_told, daemon=True)
    watcher.start()
    try:
        proc = cluster.run_on("bfa", blinkrun_argv() + ["-np", "4", "-H", "bfa:2,bfb:2", sys.executable, "-c",
                                                        STEPS_SCRIPT, marker], env=cluster.env(STALL_ENV), timeout=180)
        ended = time.monotonic()
        left_on_bfa = _described(cluster, cluster.processes("bfa"))
        left_on_bfb_cut = _described(cluster, cluster.processes("bfb"))
    finally:
        done.set()
        watcher.join()
        if entered:
            cut.__exit__(None, None, None)
    healed = time.monotonic()
    context = proc.stdout[-3000:] + proc.stderr[-8000:]
    assert entered, "rank 2 never reached the step at which the hosts are cut apart\n" + context
    assert proc.returncode != 0, context
    # what was seen, where: no heartbeat from a rank on bfb, and blinkrun heard nothing more from it
    assert re.search(r"rank 2 \(bfb\) made no progress for \d+ s .*no heartbeat from it arrived; it runs on another "
                     r"host \(bfb\)", proc.stderr), context
    assert "holds the GIL" not in proc.stderr and "reported nothing itself" not in proc.stderr, context
    assert "blinkrun: rank 2 (host bfb) failed first: blinkrun heard neither a failure nor an end from it" \
        in proc.stderr, context
    assert left_on_bfa == [], f"still running on bfa after blinkrun returned: {left_on_bfa}"
    assert not [p for p in left_on_bfb_cut if "prted" in p or "python" in p], \
        f"still running on bfb, cut off, after blinkrun returned: {left_on_bfb_cut}"
    while cluster.processes("bfb") and time.monotonic() - healed < HEALED_CLEAN_S:
        time.sleep(0.5)
    assert cluster.processes("bfb") == [], _described(cluster, cluster.processes("bfb"))
    assert ended - entered[0] < 60, ended - entered[0]
