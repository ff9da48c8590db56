"""The runtime across two real hosts: layout from host names, collectives over the network."""
import collections
import os
import re
import sys

import pytest

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.timeout(120)]

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "collectives_two_hosts.py")


def test_collectives_across_two_hosts_are_correct_and_identical_on_every_rank(cluster):
    before = cluster.received_bytes("bfb")
    proc = cluster.mpirun(4, [sys.executable, SCRIPT], env={"BLINKFLOW_BACKEND": "cpu"}, timeout=100)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The cross-host phases moved the data over TCP between the namespaces: bfb's ranks receive
    # at least their half of each float64 all-reduce's buffer (300k elements, 2.4 MB), 3 of them.
    assert cluster.received_bytes("bfb") - before > 3 * 300_000 * 8 // 2
    out = proc.stdout
    assert sorted(re.findall(r"^DONE (\d)$", out, re.M)) == ["0", "1", "2", "3"], out[-3000:]

    layouts = sorted(line.split()[1:] for line in out.splitlines() if line.startswith("LAYOUT "))
    # rank size local_rank local_size cross_rank cross_size hosts three_phase
    assert layouts == [[str(r), "4", str(r % 2), "2", str(r // 2), "2", "bfa,bfa,bfb,bfb", "True"]
                       for r in range(4)]

    digests = collections.defaultdict(dict)
    for case, rank, digest in re.findall(r"^DIGEST (\S+) (\d) (\w+)$", out, re.M):
        digests[case][rank] = digest
    assert len(digests) == 9 + 1 + 4, sorted(digests)
    for case, by_rank in digests.items():
        assert sorted(by_rank) == ["0", "1", "2", "3"] and len(set(by_rank.values())) == 1, (case, by_rank)
