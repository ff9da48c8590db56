"""The runtime across two real hosts: layout from host names, collectives over the network,
launched by plain mpirun and by blinkrun (the user's path, with its rank-tagged output)."""
import collections
import os
import re
import sys
import time

import pytest

from blinkrun_helpers import blinkrun_argv

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.timeout(120)]

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "collectives_two_hosts_script.py")
TAG = re.compile(r"^\[\d+\]<stdout>: ", re.M)


# Small pipeline chunks: many per shard, so chunks of one collective are in flight over TCP at once.
# (blinkrun forwards BLINKFLOW_* from its environment to the ranks of every host.)
CHUNKS = {"BLINKFLOW_CHUNK_BYTES": "65536"}


def launch(cluster, how, argv, nprocs=4, hosts="bfa:2,bfb:2"):
    if how == "mpirun":
        return cluster.mpirun(nprocs, argv, hosts=hosts, env={"BLINKFLOW_BACKEND": "cpu", **CHUNKS}, timeout=100)
    return cluster.run_on("bfa", blinkrun_argv() + ["-np", str(nprocs), "-H", hosts, "--backend", "cpu", *argv],
                          env=cluster.env(CHUNKS), timeout=100)


def expected_layout(hosts):
    """Horovod's numbering: local ranks count within a host, cross ranks across the hosts'
    ranks of equal local rank (hosts with fewer ranks make smaller cross groups)."""
    names = [name for spec in hosts.split(",") for name in [spec.split(":")[0]] * int(spec.split(":")[1])]
    local = [names[:r].count(names[r]) for r in range(len(names))]
    rows = []
    for r, name in enumerate(names):
        peers = [q for q in range(len(names)) if local[q] == local[r]]
        rows.append([str(r), str(len(names)), str(local[r]), str(names.count(name)), str(peers.index(r)),
                     str(len(peers)), ",".join(names), "True", CHUNKS["BLINKFLOW_CHUNK_BYTES"]])
    return rows


@pytest.mark.parametrize("how, nprocs, hosts", [("mpirun", 4, "bfa:2,bfb:2"), ("blinkrun", 4, "bfa:2,bfb:2"),
                                            ("mpirun", 3, "bfa:1,bfb:2")])   # uneven hosts
def test_collectives_across_two_hosts_are_correct_and_identical_on_every_rank(cluster, how, nprocs, hosts):
    before = cluster.received_bytes("bfb")
    proc = launch(cluster, how, [sys.executable, SCRIPT], nprocs, hosts)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The cross-host phases moved the data over TCP between the namespaces: bfb's ranks receive
    # at least their half of each float64 all-reduce's buffer (100k elements, 0.8 MB), 3 of them;
    # a launch alone brings ~12 kB.
    assert cluster.received_bytes("bfb") - before > 3 * 100_000 * 8 // 2
    out = TAG.sub("", proc.stdout)
    ranks = [str(r) for r in range(nprocs)]
    assert sorted(re.findall(r"^DONE (\d)$", out, re.M)) == ranks, out[-3000:]

    # rank size local_rank local_size cross_rank cross_size hosts three_phase chunk_bytes
    layouts = sorted(line.split()[1:] for line in out.splitlines() if line.startswith("LAYOUT "))
    assert layouts == expected_layout(hosts)

    digests = collections.defaultdict(dict)
    for case, rank, digest in re.findall(r"^DIGEST (\S+) (\d) (\w+)$", out, re.M):
        digests[case][rank] = digest
    assert len(digests) == 9 + 1 + nprocs, sorted(digests)
    for case, by_rank in digests.items():
        assert sorted(by_rank) == ranks and len(set(by_rank.values())) == 1, (case, by_rank)


LOST_RANK = """
import os, numpy as np, blinkflow as bf
bf.init()
x = np.ones(100_000, "float32")
bf.allreduce(x, name="warm")
if bf.rank() == 3:
    print("rank 3 dies", flush=True)
    os._exit(3)          # dies on bfb without a traceback (as under the OOM killer), mid-training
for step in range(1000):
    bf.allreduce(x, name=f"step{step}")
print("the others never finish", flush=True)
"""


def test_a_rank_lost_on_the_remote_host_takes_the_job_down(cluster):
    start = time.monotonic()
    proc = launch(cluster, "blinkrun", [sys.executable, "-c", LOST_RANK])
    assert proc.returncode != 0 and "never finish" not in proc.stdout, proc.stderr[-3000:]
    assert "[3]<stdout>: rank 3 dies" in proc.stdout
    assert time.monotonic() - start < 30, "the survivors should fail at once, not wait for a stall timeout"
    # Which rank blinkrun names first is a race here: rank 3's wrapper on bfb and the survivors'
    # wrappers (their MPI aborts on the closed socket) stamp the failures within milliseconds,
    # and on a busy machine bfb's wrapper can be last (1 run in 10 named rank 0, 1.2 ms ahead).
    assert re.search(r"blinkrun: rank \d \(host bf[ab]\) failed first", proc.stderr), proc.stderr[-3000:]
